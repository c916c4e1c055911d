"""Issue 40, point 2: each op of matrix/reference/ops.py pinned to the ONNX spec's formula on a one-node
model, and a test per op that fails once onnx.reference's own op follows the spec (then the
replacement can go: delete it from ops.REPLACEMENTS and its test here)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from onnx import TensorProto as T, helper as h, numpy_helper
from onnx.reference import ReferenceEvaluator

from matrix.reference.ops import REPLACEMENTS


def one_node(node, inputs: dict[str, np.ndarray], opset: int):
    graph = h.make_graph([node], "g", [h.make_tensor_value_info(n, h.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                                       for n, v in inputs.items()],
                         [h.make_value_info(o, h.make_empty_tensor_value_info(o).type) for o in node.output])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def evaluate(node, inputs, opset, replaced: bool):
    return ReferenceEvaluator(one_node(node, inputs, opset), new_ops=REPLACEMENTS if replaced else None).run(None, inputs)[0]


RNG = np.random.default_rng(0)
POOL_SHAPES = [(2, 5, 7), (2, 5, 3, 4), (2, 5, 2, 3, 4)]


def _spec_max_pool(x):  # "the other dimensions are all 1": max over every axis after N and C
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


@pytest.mark.parametrize("shape", POOL_SHAPES)
def test_global_max_pool_follows_the_spec_on_any_rank(shape):
    x = RNG.standard_normal(shape)
    assert np.array_equal(evaluate(h.make_node("GlobalMaxPool", ["x"], ["y"]), {"x": x}, 13, True), _spec_max_pool(x))


def test_onnx_global_max_pool_is_still_wrong_on_3d_input():
    """When this fails, onnx's GlobalMaxPool is right: remove ops.GlobalMaxPool."""
    x = RNG.standard_normal((2, 5, 7))
    assert evaluate(h.make_node("GlobalMaxPool", ["x"], ["y"]), {"x": x}, 13, False).shape != (2, 5, 1)


def _batchnorm(opset, **attributes):
    stats = {"s": RNG.random(3) + 0.5, "b": RNG.standard_normal(3), "m": RNG.standard_normal(3), "v": RNG.random(3) + 0.5}
    x = RNG.standard_normal((2, 3, 4, 4))
    node = h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], **attributes)
    shape = (1, 3, 1, 1)
    epsilon = float(np.float32(attributes.get("epsilon", 1e-5)))  # a FLOAT attribute
    spec = (x - stats["m"].reshape(shape)) / np.sqrt(stats["v"].reshape(shape) + epsilon) \
        * stats["s"].reshape(shape) + stats["b"].reshape(shape)
    return node, {"x": x, **stats}, spec


@pytest.mark.parametrize("opset", [9, 12, 14, 15])
def test_batch_normalization_is_its_inference_form_whatever_its_attributes(opset):
    node, inputs, spec = _batchnorm(opset, momentum=0.9, epsilon=1e-3)
    assert np.allclose(evaluate(node, inputs, opset, True), spec, rtol=1e-12, atol=1e-12)


def test_onnx_batch_normalization_9_still_takes_batch_statistics_when_momentum_is_set():
    """When this fails, onnx's opset-9 BatchNormalization is right: remove ops.BatchNormalization."""
    node, inputs, spec = _batchnorm(12, momentum=0.9)
    assert not np.allclose(evaluate(node, inputs, 12, False), spec, atol=1e-6)


def test_gather_elements_takes_along_an_axis_longer_than_64():
    data = RNG.standard_normal((2, 100))
    indices = RNG.integers(-100, 100, size=(2, 100))
    node = h.make_node("GatherElements", ["d", "i"], ["y"], axis=1)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("d", T.DOUBLE, [2, 100]),
                                       h.make_tensor_value_info("i", T.INT64, [2, 100])],
                         [h.make_tensor_value_info("y", T.DOUBLE, [2, 100])])
    got = ReferenceEvaluator(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]),
                             new_ops=REPLACEMENTS).run(None, {"d": data, "i": indices})[0]
    assert np.array_equal(got, np.take_along_axis(data, indices % 100, axis=1))


# Issue 41, sweep 5 #4: QDQ models (opset 10 to 18) and grouped transposed convolutions had no float64 value.

def _dequantize(opset: int):
    x = np.array([[2**24 + 1, -7, 127], [2**30, 0, -2**31]], np.int32)  # an int32 bias beyond float32's 2**24
    zero, scale = np.array([3, -2], np.int32), np.array([0.5, 2.0 ** -20])
    node = h.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=0)
    return node, {"x": x, "s": scale, "z": zero}, (x.astype(np.int64) - zero[:, None]) * scale[:, None]


@pytest.mark.parametrize("opset", [13, 17, 21])
def test_dequantize_linear_is_exact_at_every_opset(opset):
    node, inputs, spec = _dequantize(opset)
    got = evaluate(node, inputs, opset, True)
    assert got.dtype == np.float64 and np.array_equal(got, spec)


def test_dequantize_linear_asked_for_float32_is_float64_in_the_float64_pass():
    """Opset 23's `output_dtype = FLOAT` made the float64 evaluation's value float32 (0.1 * 3 rounded)."""
    from matrix.reference.float64_graph import float64_values

    node = h.make_node("DequantizeLinear", ["x", "s"], ["y"], output_dtype=T.FLOAT)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.INT8, [3])],
                         [h.make_tensor_value_info("y", T.FLOAT, [3])], [numpy_helper.from_array(np.float32(0.1), "s")])
    x = np.int8([3, -7, 100])
    got = float64_values(h.make_model(graph, opset_imports=[h.make_opsetid("", 23)]), {"x": x}).values["y"]
    assert got.dtype == np.float64 and np.array_equal(got, x * np.float64(np.float32(0.1)))


def test_onnx_dequantize_linear_still_lacks_opsets_below_19():
    """When this fails, onnx's DequantizeLinear exists below opset 19: check that it is exact on int32
    (test above, replaced=False) and remove ops.DequantizeLinear."""
    node, inputs, _ = _dequantize(13)
    with pytest.raises(RuntimeError, match="No implementation for operator 'DequantizeLinear'"):
        evaluate(node, inputs, 13, False)


def _quantize():
    x = np.array([np.inf, 1e12, -1e12, 2.5, 3.5, -2.5, 0.0])
    return h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]), {"x": x, "s": np.array(1.0), "z": np.int8(0)}, \
        np.array([127, 127, -128, 2, 4, -2, 0], np.int8)  # saturated; halves to even


def test_quantize_linear_saturates_and_rounds_half_to_even():
    node, inputs, spec = _quantize()
    assert np.array_equal(evaluate(node, inputs, 13, True), spec)


def test_onnx_quantize_linear_still_wraps_beyond_int32():
    """When this fails, onnx's QuantizeLinear saturates: remove ops.QuantizeLinear."""
    node, inputs, spec = _quantize()
    with np.errstate(invalid="ignore"):
        assert not np.array_equal(evaluate(node, inputs, 13, False), spec)


def _conv_transpose():
    x, w, b = RNG.standard_normal((1, 4, 5, 5)), RNG.standard_normal((4, 3, 3, 3)), RNG.standard_normal(6)
    node = h.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], group=2, pads=[1, 1, 1, 1],
                       output_padding=[1, 1])
    spec = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=2, padding=1,
                                                output_padding=1, groups=2).numpy()
    return node, {"x": x, "w": w, "b": b}, spec


def test_a_grouped_conv_transpose_is_pytorchs_in_float64():
    node, inputs, spec = _conv_transpose()
    assert np.allclose(evaluate(node, inputs, 17, True), spec, rtol=1e-12, atol=1e-12)


def test_onnx_conv_transpose_still_fails_for_groups():
    """When this fails, onnx's ConvTranspose takes groups: remove ops.ConvTranspose."""
    node, inputs, _ = _conv_transpose()
    with pytest.raises(ValueError, match="cannot reshape"):
        evaluate(node, inputs, 17, False)


# Issue 41, sweep 6 #12: where onnx.reference broke the spec, cells were `disputed` "give the case
# expected outputs" with nothing saying the float64 evaluation was the one wrong.

def _softmax_rows(x):  # the spec's formula on the 2-D coerced input, along its second axis
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _hardmax_rows(x):
    return np.eye(x.shape[1])[x.argmax(axis=1)]


AXIS_OPS = {"Softmax": _softmax_rows, "LogSoftmax": lambda x: np.log(_softmax_rows(x)), "Hardmax": _hardmax_rows}


@pytest.mark.parametrize("op", sorted(AXIS_OPS))
@pytest.mark.parametrize("axis", [None, 1, 2, -1, 0])
def test_softmax_family_before_opset_13_is_over_the_input_seen_as_2d(op, axis):
    """Opset 11: x of [2, 3, 4] with axis 1 is [2, 12] (axis given or its default, 1)."""
    x = RNG.standard_normal((2, 3, 4))
    node = h.make_node(op, ["x"], ["y"], **({} if axis is None else {"axis": axis}))
    split = (1 if axis is None else axis) % 3
    spec = AXIS_OPS[op](x.reshape(int(np.prod(x.shape[:split])), -1)).reshape(x.shape)
    assert np.allclose(evaluate(node, {"x": x}, 11, True), spec, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", sorted(AXIS_OPS))
@pytest.mark.parametrize("axis", [None, 1, 0])
def test_softmax_family_from_opset_13_is_along_its_axis(op, axis):
    x = RNG.standard_normal((2, 3, 4))
    node = h.make_node(op, ["x"], ["y"], **({} if axis is None else {"axis": axis}))
    moved = np.moveaxis(x, -1 if axis is None else axis, -1)
    spec = np.moveaxis(AXIS_OPS[op](moved.reshape(-1, moved.shape[-1])).reshape(moved.shape), -1,
                       -1 if axis is None else axis)
    assert np.allclose(evaluate(node, {"x": x}, 13, True), spec, rtol=1e-12, atol=1e-12)


def test_onnx_softmax_before_opset_13_is_still_along_the_axis_alone():
    """When this fails, onnx's Softmax coerces to 2-D before opset 13: remove ops.Softmax, LogSoftmax
    and Hardmax (check their tests above with replaced=False)."""
    x = RNG.standard_normal((2, 3, 4))
    spec = _softmax_rows(x.reshape(2, 12)).reshape(x.shape)
    assert not np.allclose(evaluate(h.make_node("Softmax", ["x"], ["y"], axis=1), {"x": x}, 11, False), spec, atol=1e-3)


def _spec_gru(x, w, r, b, clip):
    """ONNX GRU, forward, linear_before_reset 0, gates z, r, h: every activation's input bounded to
    [-clip, clip]."""
    def bounded(v):
        return np.clip(v, -clip, clip)

    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    (wz, wr, wh), (rz, rr, rh) = np.split(w[0], 3), np.split(r[0], 3)
    (wbz, wbr, wbh, rbz, rbr, rbh) = np.split(b[0], 6)
    state, ys = np.zeros((x.shape[1], r.shape[-1])), []
    for step in x:
        z = sigmoid(bounded(step @ wz.T + state @ rz.T + wbz + rbz))
        reset = sigmoid(bounded(step @ wr.T + state @ rr.T + wbr + rbr))
        hidden = np.tanh(bounded(step @ wh.T + (reset * state) @ rh.T + rbh + wbh))
        state = (1 - z) * hidden + z * state
        ys.append(state)
    return np.stack(ys)[:, None]


def _gru_clip():
    hidden = 3
    inputs = {"x": RNG.standard_normal((4, 2, 2)), "w": 4 * RNG.standard_normal((1, 3 * hidden, 2)),
              "r": 4 * RNG.standard_normal((1, 3 * hidden, hidden)), "b": RNG.standard_normal((1, 6 * hidden))}
    node = h.make_node("GRU", ["x", "w", "r", "b"], ["y"], hidden_size=hidden, clip=0.3)
    return node, inputs, _spec_gru(**inputs, clip=float(np.float32(0.3)))  # a FLOAT attribute


def test_a_gru_bounds_its_activations_inputs_by_clip():
    node, inputs, spec = _gru_clip()
    assert np.allclose(evaluate(node, inputs, 14, True), spec, rtol=1e-12, atol=1e-12)
    unclipped = h.make_node("GRU", ["x", "w", "r", "b"], ["y"], hidden_size=3)  # no clip: as before
    assert np.allclose(evaluate(unclipped, inputs, 14, True), _spec_gru(**inputs, clip=np.inf), rtol=1e-12, atol=1e-12)


def test_onnx_gru_still_ignores_clip():
    """When this fails, onnx's GRU reads `clip`: remove ops.GRU."""
    node, inputs, spec = _gru_clip()
    assert not np.allclose(evaluate(node, inputs, 14, False), spec, atol=1e-3)


def _spec_lstm_coupled(x, w, r, b, p):
    """ONNX LSTM, forward, gates i, o, f, c, peepholes i, o, f, with input_forget: f = 1 - i."""
    def sigmoid(v):
        return 1 / (1 + np.exp(-v))

    (wi, wo, _, wc), (ri, ro, _, rc) = np.split(w[0], 4), np.split(r[0], 4)
    bias = np.split(b[0], 8)
    pi, po, _ = np.split(p[0], 3)
    state = cell = np.zeros((x.shape[1], r.shape[-1]))
    ys = []
    for step in x:
        i = sigmoid(step @ wi.T + state @ ri.T + bias[0] + bias[4] + pi * cell)
        candidate = np.tanh(step @ wc.T + state @ rc.T + bias[3] + bias[7])
        cell = (1 - i) * cell + i * candidate
        state = sigmoid(step @ wo.T + state @ ro.T + bias[1] + bias[5] + po * cell) * np.tanh(cell)
        ys.append(state)
    return np.stack(ys)[:, None]


def _lstm_coupled():
    inputs = {"x": RNG.standard_normal((4, 2, 2)), "w": 2 * RNG.standard_normal((1, 12, 2)),
              "r": 2 * RNG.standard_normal((1, 12, 3)), "b": RNG.standard_normal((1, 24)), "p": RNG.standard_normal((1, 9))}
    node = h.make_node("LSTM", ["x", "w", "r", "b", "", "", "", "p"], ["y"], hidden_size=3, input_forget=1)
    return node, inputs, _spec_lstm_coupled(**inputs)


def test_an_lstm_with_input_forget_couples_its_forget_gate_to_its_input_gate():
    node, inputs, spec = _lstm_coupled()
    assert np.allclose(evaluate(node, inputs, 14, True), spec, rtol=1e-12, atol=1e-12)


def test_onnx_lstm_still_ignores_input_forget():
    """When this fails, onnx's LSTM reads `input_forget`: remove ops.LSTM."""
    node, inputs, spec = _lstm_coupled()
    assert not np.allclose(evaluate(node, inputs, 14, False), spec, atol=1e-3)


@pytest.mark.parametrize("op, attribute", [("LSTM", {"clip": 0.3}), ("RNN", {"clip": 0.3})])
def test_onnx_recurrent_ops_still_ignore_what_the_disputed_line_names(op, attribute):
    """When this fails, onnx's `op` reads `attribute`: remove it from ops.IGNORED_ATTRIBUTES (or
    replace the op). Its output with the attribute is the very output without it; the line names it."""
    from matrix.reference.ops import ignored_by_onnx_reference

    gates = {"LSTM": 4, "RNN": 1}[op]
    inputs = {"x": RNG.standard_normal((4, 2, 2)), "w": 4 * RNG.standard_normal((1, gates * 3, 2)),
              "r": 4 * RNG.standard_normal((1, gates * 3, 3))}
    node = h.make_node(op, ["x", "w", "r"], ["y"], hidden_size=3, **attribute)
    plain = h.make_node(op, ["x", "w", "r"], ["y"], hidden_size=3)
    assert np.array_equal(evaluate(node, inputs, 14, True), evaluate(plain, inputs, 14, True))
    [name] = attribute
    assert ignored_by_onnx_reference(node, inputs) == \
        f"onnx.reference's {op} ignores `{name}`: it is the float64 evaluation that misreads this node"
    assert ignored_by_onnx_reference(plain, inputs) is None


def _roi_align(mode: str):
    """A 4x4 image whose value is 4·y + x (bilinear sampling is exact on it), one ROI, 2x2 bins of
    2x2 sampling points, half_pixel (opset 16)."""
    node = h.make_node("RoiAlign", ["x", "rois", "b"], ["y"], mode=mode, output_height=2, output_width=2,
                       sampling_ratio=2)
    inputs = {"x": np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4), "rois": np.array([[0.5, 0.5, 3.2, 2.7]]),
              "b": np.array([0])}
    return node, inputs


# Each bin's sampling points (y, x) of that ROI, half_pixel: ROI from (0, 0), bins 1.1 high, 1.35 wide.
_ROI_YS, _ROI_XS = (0.275, 0.825, 1.375, 1.925), (0.3375, 1.0125, 1.6875, 2.3625)


def test_roi_align_max_is_the_bins_largest_interpolated_sample():
    """Issue 41, sweep 10 C1: the spec's max over each bin's bilinear samples, here 4·y + x at the
    bin's last sampling point; the average mode (onnx's own) is their mean."""
    node, inputs = _roi_align("max")
    spec = [[4 * _ROI_YS[2 * i + 1] + _ROI_XS[2 * j + 1] for j in range(2)] for i in range(2)]
    np.testing.assert_allclose(evaluate(node, inputs, 16, True)[0, 0], spec, rtol=1e-12)
    node, inputs = _roi_align("avg")
    mean = [[4 * np.mean(_ROI_YS[2 * i:2 * i + 2]) + np.mean(_ROI_XS[2 * j:2 * j + 2]) for j in range(2)] for i in range(2)]
    np.testing.assert_allclose(evaluate(node, inputs, 16, True)[0, 0], mean, rtol=1e-12)


def test_onnx_roi_align_max_still_takes_the_largest_weighted_corner():
    """onnx's (and onnxruntime's, which warns that it is incorrect) "max" of bin (0, 1) is 3.40, below
    the mean of the values sampled in that bin (4.23): no max is."""
    node, inputs = _roi_align("max")
    assert evaluate(node, inputs, 16, False)[0, 0, 0, 1] < 4 * np.mean(_ROI_YS[:2]) + np.mean(_ROI_XS[2:])


def test_mean_variance_normalization_is_its_function_body_in_float64():
    """Issue 41, sweep 10 C9: onnx's raised on float64 input (its body's float32 Epsilon), and the
    output fell back to onnxruntime's own values. The body: (X - E[X]) / (sqrt(E[X²] - E[X]²) + 1e-9)."""
    x = RNG.standard_normal((2, 3, 4, 5))
    node = h.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2, 3])
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    spec = (x - mean) / (np.sqrt((x ** 2).mean(axis=(0, 2, 3), keepdims=True) - mean ** 2) + 1e-9)
    np.testing.assert_allclose(evaluate(node, {"x": x}, 13, True), spec, rtol=1e-12)
    constant = np.full((1, 2, 2, 2), 3.0)  # a constant channel: 0 / (0 + 1e-9) = 0
    assert np.array_equal(evaluate(node, {"x": constant}, 13, True), np.zeros_like(constant))


def test_onnx_mean_variance_normalization_still_fails_on_float64():
    with pytest.raises(Exception, match="mismatch"):
        evaluate(h.make_node("MeanVarianceNormalization", ["x"], ["y"]), {"x": RNG.standard_normal((1, 2, 2, 2))}, 13,
                 False)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_divides_by_the_lp_norm(p):
    """Issue 41, sweep 10 C4: PyTorch's normalize in float64 as the spec's formula, along each axis.
    Sweep 13 F12: a row of zeros stays zeros (NaN there disputed every engine), as in PyTorch's."""
    x = RNG.standard_normal((2, 3, 4))
    x[1, :, 2] = 0  # along axis 1: one all-zero row
    for axis in (0, 1, -1):
        node = h.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p)
        np.testing.assert_allclose(evaluate(node, {"x": x}, 13, True),
                                   torch.nn.functional.normalize(torch.from_numpy(x), p=p, dim=axis).numpy(), rtol=1e-12)


def test_onnx_lp_normalization_still_divides_p1_by_the_plain_sum():
    x = np.array([[3.0, -4.0, 0.0]])
    assert evaluate(h.make_node("LpNormalization", ["x"], ["y"], axis=1, p=1), {"x": x}, 13, False)[0, 0] == -3.0


def _lrn(size: int):
    return h.make_node("LRN", ["x"], ["y"], size=size, alpha=0.5, beta=0.75, bias=1.5)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_is_pytorchs_local_response_norm_for_odd_sizes(size):
    """Issue 41, sweep 10 C4: for odd sizes the spec's window is PyTorch's (same padding both sides).
    PyTorch averages the squares with a pooling op whose float64 sum differs at 1e-9 relative."""
    x = 10 * RNG.standard_normal((2, 6, 3, 3))
    torch_lrn = torch.nn.functional.local_response_norm(torch.from_numpy(x), size, alpha=0.5, beta=0.75, k=1.5).numpy()
    np.testing.assert_allclose(evaluate(_lrn(size), {"x": x}, 13, True), torch_lrn, rtol=1e-7)


def test_lrn_of_an_even_size_reaches_one_channel_further_up():
    """The spec: from c − ⌊(size−1)/2⌋ to c + ⌈(size−1)/2⌉; size 2 sums channels c and c + 1."""
    x = np.array([1.0, 2.0, 3.0]).reshape(1, 3, 1, 1)
    sums = np.array([1 + 4, 4 + 9, 9]).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(evaluate(_lrn(2), {"x": x}, 13, True), x / (1.5 + 0.5 / 2 * sums) ** 0.75, rtol=1e-12)


def test_onnx_lrn_is_still_off():
    x = 10 * RNG.standard_normal((1, 5, 2, 2))
    spec = evaluate(_lrn(3), {"x": x}, 13, True)
    assert np.abs(evaluate(_lrn(3), {"x": x}, 13, False) - spec).max() > 1


def _grid_sample(mode: str, padding: str, align: int):
    x, grid = RNG.standard_normal((1, 2, 5, 6)), RNG.uniform(-1.4, 1.4, (1, 4, 3, 2))  # some points outside
    return h.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding, align_corners=align), \
        {"x": x, "g": grid}


@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_cubic_border_takes_each_neighbour_outside_as_the_border(align):
    """Issue 41, sweep 10 C4: PyTorch's reading, which onnxruntime shares: the point stays where it is,
    and each tap of its 4x4 neighbourhood outside the image is the border's value — a hand-written
    bicubic (a = -0.75) on the image padded by repeating its edge."""
    node, inputs = _grid_sample("cubic", "border", align)
    x, grid = inputs["x"], inputs["g"]
    height, width = x.shape[2:]
    padded = np.pad(x, ((0, 0), (0, 0), (4, 4), (4, 4)), mode="edge")  # every tap of these points falls inside it

    def weights(t):  # the cubic convolution kernel's four weights at offset t in [0, 1)
        a = -0.75
        return [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a, ((a + 2) * t - (a + 3)) * t * t + 1,
                ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]

    def unnormalize(coordinate, size):  # the point itself stays outside: only its taps are bounded
        return (coordinate + 1) / 2 * (size - 1) if align else ((coordinate + 1) * size - 1) / 2

    spec = np.empty((1, 2) + grid.shape[1:3])
    for i, j in np.ndindex(grid.shape[1:3]):
        px, py = unnormalize(grid[0, i, j, 0], width), unnormalize(grid[0, i, j, 1], height)
        x0, y0 = int(np.floor(px)), int(np.floor(py))
        wx, wy = weights(px - x0), weights(py - y0)
        patch = padded[0, :, y0 - 1 + 4:y0 + 3 + 4, x0 - 1 + 4:x0 + 3 + 4]
        spec[0, :, i, j] = np.einsum("cyx,y,x->c", patch, wy, wx)
    np.testing.assert_allclose(evaluate(node, inputs, 20, True), spec, rtol=1e-9, atol=1e-12)


def test_onnx_grid_sample_cubic_border_is_still_off():
    node, inputs = _grid_sample("cubic", "border", 1)
    assert np.abs(evaluate(node, inputs, 20, False) - evaluate(node, inputs, 20, True)).max() > 1e-3


def test_batch_normalization_in_training_mode_takes_the_batchs_statistics():
    """Issue 41, sweep 11 D1: training_mode 1 had no float64 evaluation (the replacement refused it), and
    the referee's float32 output stood in. The spec: the batch's mean and population variance, and the
    running statistics moved by momentum."""
    x, scale, bias = RNG.standard_normal((2, 3, 4, 4)), RNG.random(3) + 0.5, RNG.standard_normal(3)
    mean, var = RNG.standard_normal(3), RNG.random(3) + 0.5
    node = h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1, momentum=0.8)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info(n, T.DOUBLE, v.shape) for n, v in
                                       (("x", x), ("s", scale), ("b", bias), ("m", mean), ("v", var))],
                         [h.make_value_info(o, h.make_empty_tensor_value_info(o).type) for o in node.output])
    y, running_mean, running_var = ReferenceEvaluator(h.make_model(graph, opset_imports=[h.make_opsetid("", 15)]),
                                                      new_ops=REPLACEMENTS).run(None, {"x": x, "s": scale, "b": bias,
                                                                                      "m": mean, "v": var})
    batch_mean, batch_var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    at = (1, 3, 1, 1)
    spec = (x - batch_mean.reshape(at)) / np.sqrt(batch_var.reshape(at) + 1e-5) * scale.reshape(at) + bias.reshape(at)
    np.testing.assert_allclose(y, spec, rtol=1e-12, atol=1e-12)
    momentum = float(np.float32(0.8))  # an ONNX float attribute is a float32
    np.testing.assert_allclose(running_mean, momentum * mean + (1 - momentum) * batch_mean, rtol=1e-12)
    np.testing.assert_allclose(running_var, momentum * var + (1 - momentum) * batch_var, rtol=1e-12)


def test_erf_is_float64():
    """Issue 41, sweep 12 E3: onnx's Erf returns float32 whatever its input, so (1 - Erf(x)) · 1e6 was
    judged against float32's rounding of Erf."""
    x = np.array([0.3, 2.5, 3.0, 3.5, -1.2])
    node = h.make_node("Erf", ["x"], ["y"])
    np.testing.assert_array_equal(evaluate(node, {"x": x}, 13, True), [math.erf(v) for v in x])


def test_onnx_erf_still_rounds_to_float32():
    value = evaluate(h.make_node("Erf", ["x"], ["y"]), {"x": np.array([2.5])}, 13, False)[0]
    assert float(value) == float(np.float32(math.erf(2.5))) != math.erf(2.5)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_is_theta_times_the_pixel_centres_in_float64(align):
    """Issue 41, sweep 12 E6: the spec's grid, theta · [x, y, 1] over the normalised pixel positions
    (centres for align_corners 0, corners for 1), in theta's type."""
    theta = np.array([[[0.1, 0.2, 0.3], [0.7, 0.6, 0.1]]])
    height, width = 3, 4

    def positions(count):
        return [-1 + 2 * i / (count - 1) if align else (2 * i + 1) / count - 1 for i in range(count)]

    spec = np.array([[[theta[0] @ [x, y, 1.0] for x in positions(width)] for y in positions(height)]])
    node = h.make_node("AffineGrid", ["theta", "size"], ["g"], align_corners=align)
    grid = evaluate(node, {"theta": theta, "size": np.array([1, 1, height, width], np.int64)}, 20, True)
    assert grid.dtype == np.float64
    np.testing.assert_allclose(grid, spec, rtol=1e-12, atol=1e-15)


def test_onnx_affine_grid_still_returns_float32():
    node = h.make_node("AffineGrid", ["theta", "size"], ["g"])
    theta = np.array([[[0.1, 0.2, 0.3], [0.7, 0.6, 0.1]]])
    assert evaluate(node, {"theta": theta, "size": np.array([1, 1, 3, 3], np.int64)}, 20, False).dtype == np.float32


@pytest.mark.parametrize("opset", [2, 13, 18])
def test_a_negative_pad_removes_that_many_elements(opset):
    """Issue 41, sweep 12 E12: the spec's negative pad crops that end; with `axes` (opset 18), only those."""
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    pads = [0, -1, 2, 0, 1, -1]  # axis 1: one off the front, one added at its end; axis 2: two in front, one off the end
    if opset == 2:
        node = h.make_node("Pad", ["x"], ["y"], pads=pads, value=7.0)
        inputs = {"x": x}
    elif opset == 13:
        node = h.make_node("Pad", ["x", "pads", "c"], ["y"])
        inputs = {"x": x, "pads": np.array(pads, np.int64), "c": np.array(7.0)}
    else:
        node = h.make_node("Pad", ["x", "pads", "c", "axes"], ["y"])
        inputs = {"x": x, "pads": np.array([-1, 2, 1, -1], np.int64), "c": np.array(7.0), "axes": np.array([1, -1], np.int64)}
    spec = np.pad(x[:, 1:, :3], [(0, 0), (0, 1), (2, 0)], constant_values=7.0)
    np.testing.assert_array_equal(evaluate(node, inputs, opset, True), spec)


def test_onnx_pad_still_refuses_a_negative_pad():
    node = h.make_node("Pad", ["x", "pads"], ["y"])
    with pytest.raises(ValueError):
        evaluate(node, {"x": np.zeros((2, 3)), "pads": np.array([0, -1, 0, 0], np.int64)}, 13, False)


def _running_sum_scan(**layout):
    """y = the running sum of x's slices along the scan axis (state: the sum so far; scan output: it)."""
    body = h.make_graph([h.make_node("Add", ["s_in", "x_t"], ["s_out"]), h.make_node("Identity", ["s_out"], ["y_t"])], "body",
                        [h.make_tensor_value_info("s_in", T.DOUBLE, [2]), h.make_tensor_value_info("x_t", T.DOUBLE, [2])],
                        [h.make_tensor_value_info("s_out", T.DOUBLE, [2]), h.make_tensor_value_info("y_t", T.DOUBLE, [2])])
    return h.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1, **layout)


@pytest.mark.parametrize("layout", [{}, {"scan_input_directions": [1]}, {"scan_input_axes": [1], "scan_output_axes": [-1]},
                                    {"scan_input_axes": [-1], "scan_input_directions": [1], "scan_output_directions": [1]}])
def test_a_scan_runs_along_its_axes_and_directions(layout):
    """Issue 41, sweep 12 E12: the spec's layout: a scan input is sliced along its axis (backwards where
    its direction is 1), and a scan output stacks its slices along its own axis (last first where 1)."""
    along = layout.get("scan_input_axes", [0])[0] % 2
    x = np.moveaxis(np.arange(6, dtype=np.float64).reshape(3, 2), 0, along)  # 3 slices of 2 along the scan axis
    slices = list(np.moveaxis(x, along, 0))
    if layout.get("scan_input_directions", [0])[0]:
        slices = slices[::-1]
    sums = np.cumsum(slices, axis=0)
    stacked = sums[::-1] if layout.get("scan_output_directions", [0])[0] else sums
    spec = np.moveaxis(stacked, 0, layout.get("scan_output_axes", [0])[0] % 2)
    model = one_node(_running_sum_scan(**layout), {"s0": np.zeros(2), "x": x}, 16)
    state, y = ReferenceEvaluator(model, new_ops=REPLACEMENTS).run(None, {"s0": np.zeros(2), "x": x})
    np.testing.assert_array_equal(state, sums[-1])
    np.testing.assert_array_equal(y, spec)


def test_onnx_scan_still_refuses_a_reverse_direction():
    model = one_node(_running_sum_scan(scan_input_directions=[1]), {"s0": np.zeros(2), "x": np.zeros((3, 2))}, 16)
    with pytest.raises(RuntimeError, match="input_direction"):
        ReferenceEvaluator(model).run(None, {"s0": np.zeros(2), "x": np.zeros((3, 2))})


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_takes_its_coordinates_in_float64(mode):
    """Issue 41, sweep 12 E3: onnx's GridSample rounds each sample's pixel coordinates to float32; a
    point 1e-9 past a pixel of a steep image moved by float32's unit there. PyTorch's in float64."""
    x = np.array([0.0, 1e9, 0.0, 0.0]).reshape(1, 1, 1, 4)
    grid = np.array([[[[-0.5 + 1e-9, 0.0], [0.123456789, 0.0]]]])  # [N, H_out, W_out, 2]: x, y
    node = h.make_node("GridSample", ["x", "g"], ["y"], mode=mode, align_corners=0)
    torch_mode = "bilinear" if mode == "linear" else "nearest"
    spec = torch.nn.functional.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), mode=torch_mode,
                                           padding_mode="zeros", align_corners=False).numpy()
    np.testing.assert_allclose(evaluate(node, {"x": x, "g": grid}, 20, True), spec, rtol=1e-12)


def test_onnx_grid_sample_still_takes_float32_coordinates():
    x = np.array([0.0, 1e9, 0.0, 0.0]).reshape(1, 1, 1, 4)
    grid = np.array([[[[-0.5 + 1e-9, 0.0]]]])
    node = h.make_node("GridSample", ["x", "g"], ["y"], mode="linear", align_corners=0)
    assert evaluate(node, {"x": x, "g": grid}, 20, False)[0, 0, 0, 0] != evaluate(node, {"x": x, "g": grid}, 20, True)[0, 0, 0, 0]


def _loop_of(value_shape: list[int], trips: int):
    """Loop(trips): the body scans out x (of `value_shape`) plus the iteration number."""
    body = h.make_graph([h.make_node("Cast", ["it"], ["f"], to=T.DOUBLE), h.make_node("Add", ["x", "f"], ["scan"]),
                         h.make_node("Identity", ["c_in"], ["c_out"])], "body",
                        [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, [])],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("scan", T.DOUBLE, value_shape)])
    x = np.arange(float(np.prod(value_shape))).reshape(value_shape)
    node = h.make_node("Loop", ["n", "yes"], ["y"], body=body)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.DOUBLE, value_shape)],
                         [h.make_value_info("y", h.make_empty_tensor_value_info("y").type)],
                         [numpy_helper.from_array(np.array(trips, np.int64), "n"), numpy_helper.from_array(np.array(True), "yes")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), x


@pytest.mark.parametrize("shape", [[], [2], [2, 3]])
@pytest.mark.parametrize("trips", [0, 3])
def test_a_loops_scan_outputs_stack_along_a_new_first_axis(shape, trips):
    """Issue 41, sweep 13 F3, F4: each iteration's value stacked, [trips, *shape], as onnxruntime gives
    it; after no iteration empty, of the body's declared shape."""
    model, x = _loop_of(shape, trips)
    y = ReferenceEvaluator(model, new_ops=REPLACEMENTS).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, np.stack([x + i for i in range(trips)]) if trips else np.empty((0, *shape)))
    assert y.shape == (trips, *shape)


def test_onnx_loop_still_stacks_scalars_as_a_column():
    model, x = _loop_of([], 3)
    assert ReferenceEvaluator(model).run(None, {"x": x})[0].shape == (3, 1)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization_is_its_formula_in_float64(opset):
    """Issue 41, sweep 13 F5: per group of channels, (x − mean) / √(var + ε), then each channel's (opset
    21) or each group's (opset 18) scale and bias."""
    x = 100 + 0.1 * RNG.standard_normal((2, 4, 3, 2))
    scale, bias = (np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.5, -1.0, 0.0, 2.0])) if opset == 21 else \
        (np.array([2.0, 3.0]), np.array([0.5, -1.0]))
    groups = x.reshape(2, 2, -1)
    epsilon = float(np.float32(1e-5))  # the attribute's default, a float32
    normal = ((groups - groups.mean(-1, keepdims=True)) / np.sqrt(groups.var(-1, keepdims=True) + epsilon)).reshape(x.shape)
    per_channel = (scale, bias) if opset == 21 else (np.repeat(scale, 2), np.repeat(bias, 2))
    spec = normal * per_channel[0].reshape(1, 4, 1, 1) + per_channel[1].reshape(1, 4, 1, 1)
    node = h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    np.testing.assert_allclose(evaluate(node, {"x": x, "s": scale, "b": bias}, opset, True), spec, rtol=1e-12)


def test_onnx_group_normalization_still_computes_in_float32():
    x = 100 + 0.1 * RNG.standard_normal((1, 4, 8))
    node = h.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    inputs = {"x": x, "s": np.ones(4), "b": np.zeros(4)}
    assert np.abs(evaluate(node, inputs, 21, False) - evaluate(node, inputs, 21, True)).max() > 1e-3


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_is_its_formula_in_float64(approximate):
    """Issue 41, sweep 13 F5: onnx's runs its function body, with its own float32 Erf."""
    x = np.array([-3.0, -0.5, 0.1, 2.5])
    spec = [0.5 * v * (1 + (math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)) if approximate == "tanh"
                            else math.erf(v / math.sqrt(2)))) for v in x]
    node = h.make_node("Gelu", ["x"], ["y"], approximate=approximate)
    np.testing.assert_allclose(evaluate(node, {"x": x}, 20, True), spec, rtol=1e-14)


def test_onnx_gelu_still_rounds_its_erf_to_float32():
    node = h.make_node("Gelu", ["x"], ["y"])
    x = {"x": np.array([-3.0, -2.5, 0.7])}
    assert not np.array_equal(evaluate(node, x, 20, False), evaluate(node, x, 20, True))


def test_an_optional_is_its_value_and_an_empty_one_has_none():
    """Issue 41, sweep 13 F2: onnx's Optional wraps its value in a list, which OptionalGetElement hands
    on as a list; and its empty optional, [None], has an element."""
    nodes = [h.make_node("Optional", ["x"], ["o"]), h.make_node("OptionalGetElement", ["o"], ["y"]),
             h.make_node("OptionalHasElement", ["o"], ["has"]),
             h.make_node("Optional", [], ["none"], type=h.make_tensor_type_proto(T.DOUBLE, [2])),
             h.make_node("OptionalHasElement", ["none"], ["hasnt"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.DOUBLE, [2])],
                         [h.make_value_info(name, h.make_empty_tensor_value_info(name).type) for name in ("y", "has", "hasnt")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    y, has, hasnt = ReferenceEvaluator(model, new_ops=REPLACEMENTS).run(None, {"x": np.array([1.0, 2.0])})
    assert isinstance(y, np.ndarray) and y.tolist() == [1.0, 2.0] and has and not hasnt
    assert isinstance(ReferenceEvaluator(model).run(None, {"x": np.array([1.0, 2.0])})[0], list)  # onnx's own


def test_quantize_linear_computes_in_its_precision():
    """Issue 41, sweep 14 G11: opset 25's `precision` is the type x / y_scale is computed in: FP16 rounds
    1000.6 to 1000.5, then to 1000 (half to even), as onnxruntime and onnx's own do."""
    x = np.array([1000.6, 1001.3, 2049, 300.2, 30000.7])
    node = h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], precision=T.FLOAT16)
    inputs = {"x": x, "s": np.array(1.0), "z": np.array(0, np.int16)}
    np.testing.assert_array_equal(evaluate(node, inputs, 25, True), [1000, 1002, 2048, 300, 30000])
    plain = h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    np.testing.assert_array_equal(evaluate(plain, inputs, 25, True), [1001, 1001, 2049, 300, 30001])


def test_roi_align_of_opset_10_is_output_half_pixel():
    """Issue 41, sweep 14 G14: opset 10 has no coordinate_transformation_mode; its behaviour is opset
    16's `output_half_pixel`, which onnx.reference read as the newest default, `half_pixel`."""
    node, inputs = _roi_align("avg")
    older = h.make_node("RoiAlign", ["x", "rois", "b"], ["y"], mode="avg", output_height=2, output_width=2,
                        sampling_ratio=2, coordinate_transformation_mode="output_half_pixel")
    np.testing.assert_array_equal(evaluate(node, inputs, 10, True), evaluate(older, inputs, 16, True))
    assert not np.array_equal(evaluate(node, inputs, 10, True), evaluate(node, inputs, 16, True))


@pytest.mark.parametrize("older, newer", [("bilinear", "linear"), ("bicubic", "cubic"), ("nearest", "nearest")])
def test_grid_sample_takes_opset_16s_mode_names(older, newer):
    """Issue 41, sweep 14 G13: opset 16's GridSample names its modes bilinear and bicubic."""
    x, grid = RNG.standard_normal((1, 2, 4, 5)), RNG.uniform(-1.2, 1.2, (1, 3, 2, 2))
    np.testing.assert_array_equal(evaluate(h.make_node("GridSample", ["x", "g"], ["y"], mode=older), {"x": x, "g": grid}, 16, True),
                                  evaluate(h.make_node("GridSample", ["x", "g"], ["y"], mode=newer), {"x": x, "g": grid}, 20, True))
