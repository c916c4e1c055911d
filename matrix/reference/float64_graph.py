"""Every intermediate tensor of an ONNX graph in float64: the reference, `explain` and the forecast.

The graph with every floating-point type made float64 (inputs, initializers, constants, Cast
targets, subgraphs too) is evaluated node by node with onnx.reference (numpy), each node as a
one-node model at the model's own opsets (a node evaluated alone would run the newest version of
its op: opset 12's Squeeze(axes=[0]) would squeeze every size-1 axis), with what its subgraphs read
from the outer scope as inputs, and the spec-following replacements of ops.py. Node by node, so
that a node whose op has no float64 implementation is named and skipped, with every node that
depends on it, rather than guessed.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterator

import ml_dtypes
import numpy as np
import onnx
import onnx.inliner
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ..graph_walk import FLOAT_TYPES, every_node, node_inputs, subgraphs
from .body_steps import INSIDE, decided_inside, holds_a_step
from .ops import REPLACEMENTS
from .steps import SELECTING, is_step, jumped

# Ops whose output is a random draw, not a function of their inputs: no two evaluations share it.
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
# Attributes that name an output element type (Cast's `to`, RandomNormal's `dtype`, DequantizeLinear's
# `output_dtype`, the window ops' and MelWeightMatrix's `output_datatype`: issue 41, sweep 11 D1;
# Attention's `softmax_precision`, its logits' type: sweep 13 F9). BitCast's `to` names a bit layout.
TYPE_ATTRIBUTES = {"to", "dtype", "output_dtype", "output_datatype", "softmax_precision"}


# A Cast to these is the model's own rounding (an autocast export's FP16 island): kept in float64.
NARROW_CASTS = {TensorProto.FLOAT16: np.float16, TensorProto.BFLOAT16: ml_dtypes.bfloat16}


def _narrowed(node: onnx.NodeProto, given: dict[str, np.ndarray], produced: dict[str, np.ndarray],
              narrow: bool, source_type: int | None = None) -> dict[str, np.ndarray]:
    """A Cast to FP16 or BF16 rounds as the model says, though its value is kept in float64:
    `Cast(Cast(x, FLOAT16), FLOAT)` is x rounded to FP16 (70000 is inf), not x. So does a Cast of
    integers or strings to FLOAT: 16777217 is 16777216 in the model (ids, positions), whatever follows; a Cast of
    DOUBLE to FLOAT (`source_type`, the input's declared type): a float64 feed narrowed by the model
    itself is float32 from there on; and a DequantizeLinear to FP16 or BF16 (`output_dtype`). A
    BitCast's float value is widened (its `to` is no precision: issue 41, sweep 13 F10)."""
    if node.op_type == "BitCast":  # its bits read as the type `to` names, exact in float64
        return {name: as_float64(value) for name, value in produced.items()}
    source = given.get(node.input[0]) if node.input else None
    # integers made floats are values, not arithmetic: an FP16 copy's Cast of 2049 is 2048 (sweep 15 H14)
    to = _narrowing_target(node) if narrow or (source is not None and source.dtype.kind in "iubUSO") else None
    if node.op_type == "DequantizeLinear" and to not in NARROW_CASTS:  # to FP16 or BF16 (sweep 13 F1), or an
        if not narrow or to not in (None, TensorProto.FLOAT) or not _past_float32(source):  # int32 past 2^24
            return produced  # (sweep 15 H2: 16777217 dequantized is 16777216 in the model)
        to_type = np.float32
    elif to == TensorProto.FLOAT and source is not None and (source.dtype.kind in "iubUSO" or source_type == TensorProto.DOUBLE):
        to_type = np.float32
    elif to in NARROW_CASTS:
        to_type = NARROW_CASTS[to]
    else:
        return produced
    with np.errstate(over="ignore"):
        return {name: value.astype(to_type).astype(np.float64) for name, value in produced.items()}


def _past_float32(values: np.ndarray | None) -> bool:
    """Integers some of which float32 cannot hold (past 2^24)."""
    return values is not None and values.dtype.kind in "iu" and values.size > 0 and \
        float(np.abs(values.astype(np.float64)).max()) > 2.0 ** 24


def node_label(node: onnx.NodeProto, index: int) -> str:
    """A node's name, or op type and position for an unnamed one: what the tables show."""
    return node.name or f"{node.op_type}#{index}"


def as_float64(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64) if np.issubdtype(array.dtype, np.floating) else array


def _float64_tensor(tensor: onnx.TensorProto) -> None:
    if tensor.data_type in FLOAT_TYPES:
        tensor.CopyFrom(numpy_helper.from_array(as_float64(numpy_helper.to_array(tensor)), tensor.name))


def _float64_type(value: onnx.ValueInfoProto) -> None:
    kind = value.type.WhichOneof("value")
    if kind == "tensor_type" and value.type.tensor_type.elem_type in FLOAT_TYPES:
        value.type.tensor_type.elem_type = TensorProto.DOUBLE


def _float64_graph(graph: onnx.GraphProto, narrow: bool) -> None:
    """A branch or body made float64 as the main graph is node by node (float64_nodes): its Constants
    of `value_float` too (issue 41, sweep 11 D6), and its Casts to FP16 or BF16 still rounding
    (`narrow`; sweep 11 D10: a round trip through FP16 in an If branch was no step at all)."""
    for tensor in graph.initializer:
        _float64_tensor(tensor)
    for value in (*graph.input, *graph.output, *graph.value_info):
        _float64_type(value)
    nodes = []
    for node in graph.node:
        as_tensor_constant(node)
        if (kept := (narrow and _rounding_cast(node)) or _widened_bitcast(node)):
            nodes += kept
            continue
        _float64_attributes(node, narrow)
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


def _widened_bitcast(node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
    """A BitCast to a float as the BitCast itself, then a Cast to float64 under its output's name."""
    to = _cast_to(node) if node.op_type == "BitCast" else None
    if to not in FLOAT_TYPES:
        return None
    bits = onnx.NodeProto.FromString(node.SerializeToString())
    bits.output[0] = f"{node.output[0]}__bits"
    return [bits, helper.make_node("Cast", [bits.output[0]], [node.output[0]], to=TensorProto.DOUBLE)]


def _rounding_cast(node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
    """A Cast to FP16, BF16 or FLOAT (or a DequantizeLinear to FP16 or BF16) as itself, then a Cast to
    float64 under its output's name: the value rounds as the model says and goes on in float64, as
    _narrowed has it in the main graph (16777217 is 16777216 in the model: issue 41, sweep 12 E1). A
    Cast of a float32 that shape inference knows is an Identity by now (evaluated_form); one of a value
    of unknown type still rounds."""
    to = _narrowing_target(node)
    if to not in NARROW_CASTS and (to != TensorProto.FLOAT or node.op_type != "Cast"):  # DequantizeLinear: FP16, BF16
        return None
    rounded = onnx.NodeProto.FromString(node.SerializeToString())
    rounded.output[0] = f"{node.output[0]}__rounded"
    return [rounded, helper.make_node("Cast", [rounded.output[0]], [node.output[0]], to=TensorProto.DOUBLE)]


# Ops whose `output_datatype` is FLOAT where the node leaves it out: given as DOUBLE (sweep 14 G8).
DEFAULT_FLOAT_OUTPUT = {"HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"}


def _float64_attributes(node: onnx.NodeProto, narrow: bool) -> None:
    if node.op_type in DEFAULT_FLOAT_OUTPUT and not any(a.name == "output_datatype" for a in node.attribute):
        node.attribute.append(helper.make_attribute("output_datatype", TensorProto.DOUBLE))
    for attribute in node.attribute:
        if attribute.name in TYPE_ATTRIBUTES and attribute.type == onnx.AttributeProto.INT \
                and attribute.i in FLOAT_TYPES and node.op_type != "BitCast":
            attribute.i = TensorProto.DOUBLE
        elif attribute.type == onnx.AttributeProto.TENSOR:
            _float64_tensor(attribute.t)
        elif attribute.type == onnx.AttributeProto.GRAPH:
            _float64_graph(attribute.g, narrow)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            for graph in attribute.graphs:
                _float64_graph(graph, narrow)


def _value_info(name: str, value) -> onnx.ValueInfoProto:
    if isinstance(value, np.ndarray) and value.dtype.kind not in "USO":
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), None)
    if isinstance(value, np.ndarray):
        return helper.make_tensor_value_info(name, TensorProto.STRING, None)
    return helper.make_value_info(name, onnx.TypeProto())


def one_node_model(node: onnx.NodeProto, given: dict[str, np.ndarray], model: onnx.ModelProto) -> onnx.ModelProto:
    """`node` as a model of its own, at `model`'s opsets, with its local functions."""
    graph = helper.make_graph([node], "node", [_value_info(name, value) for name, value in given.items()],
                              [helper.make_value_info(name, onnx.TypeProto()) for name in node.output if name])
    return helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions),
                             ir_version=model.ir_version)


def evaluate_node(node: onnx.NodeProto, given: dict[str, np.ndarray], model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """{output: value} of one node on `given` (every name node_inputs lists), in the types given."""
    # inf/NaN are values here, reported where they matter; numpy's words on them ("Mean of empty
    # slice") are not the user's to read
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        results = ReferenceEvaluator(one_node_model(node, given, model), new_ops=REPLACEMENTS).run(None, given)
    names = [name for name in node.output if name]
    # A sequence is a list of tensors, kept as one for the nodes that read it (issue 41, sweep 11 D5)
    return {name: [np.asarray(item) for item in out] if isinstance(out, list) else np.asarray(out)
            for name, out in zip(names, results)}


def float64_node(node: onnx.NodeProto, narrow: bool = True) -> onnx.NodeProto:
    """A copy of `node` whose floating types, constants and subgraphs are float64 (`narrow`: see
    float64_nodes)."""
    node = onnx.NodeProto.FromString(node.SerializeToString())
    as_tensor_constant(node)
    _float64_attributes(node, narrow)
    return node


def as_tensor_constant(node: onnx.NodeProto) -> None:
    """A Constant given as `value_float` or `value_floats` (a common exporter form), or a
    ConstantOfShape without `value` (the spec's float32 0), given as the same float32 tensor `value`
    instead, in place: the form both rewrites (float64, FP16) know (issue 41, sweep 12 E6)."""
    if node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):
        node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.zeros(1, np.float32))))
        return
    given = next((a for a in node.attribute if a.name in ("value_float", "value_floats")), None) \
        if node.op_type == "Constant" else None
    if given is None:
        return
    array = np.float32(given.f) if given.name == "value_float" else np.array(given.floats, np.float32)
    node.attribute.remove(given)
    node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(array)))


def casts_to_string(node: onnx.NodeProto) -> bool:
    """Cast(to=STRING) prints its input: a float made float64 would print with float64's digits
    ("0.10000000149011612" for float32's 0.1), so it reads its input in the model's own type."""
    return node.op_type == "Cast" and any(a.name == "to" and a.i == TensorProto.STRING for a in node.attribute)


def _cast_source_types(model: onnx.ModelProto) -> dict[str, int]:
    """{value: its element type in the model} for the inputs of Cast(to=STRING), and of Cast(to=FLOAT)
    in a model that holds DOUBLE at all: what making every float float64 hides, and those Casts read."""
    # anywhere, a branch's too (sweep 14 G3): an input, a weight, a Cast to it, a Constant of it
    doubles = any(v.type.tensor_type.elem_type == TensorProto.DOUBLE for graph in _graphs(model.graph) for v in graph.input) \
        or any(t.data_type == TensorProto.DOUBLE for graph in _graphs(model.graph) for t in graph.initializer) or any(
            a.name in TYPE_ATTRIBUTES and a.i == TensorProto.DOUBLE or a.type == onnx.AttributeProto.TENSOR
            and a.t.data_type == TensorProto.DOUBLE for node in every_node(model.graph) for a in node.attribute)
    wanted = {node.input[0] for node in model.graph.node if casts_to_string(node) or doubles and node.op_type == "Cast"
              and any(a.name == "to" and a.i == TensorProto.FLOAT for a in node.attribute)}
    if not wanted:
        return {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - without types the float64 text stands, and differs where it does
        return {}
    values = [*inferred.input, *inferred.value_info, *inferred.output]
    types = {v.name: v.type.tensor_type.elem_type for v in values if v.name in wanted}
    types.update({t.name: t.data_type for t in inferred.initializer if t.name in wanted})
    return types


@dataclass
class Float64Values:
    values: dict[str, np.ndarray]
    # Node label → why it has no float64 value (no implementation, or an input without one).
    missing: dict[str, str] = field(default_factory=dict)
    # Graph output → the step node whose result float32 rounding decides (_jumps_in_own_types), upstream.
    decided: dict[str, str] = field(default_factory=dict)
    # The steps that their own inputs held in float32 do not decide, {order: their float64 outputs},
    # and each graph output's such steps upstream: what a float32 evaluation computed before the step
    # may still decide it (`Sign(Sub(a + 2**-26, a))`), which the referee's values tell (rounding.py).
    steps: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    upstream: dict[str, frozenset[int]] = field(default_factory=dict)
    # The outputs of an If, a Loop or a Scan a step inside it decides (body_steps.py), graph outputs
    # or not: the check does not hold such a node against the referee (their values part by the flip).
    inside: dict[str, str] = field(default_factory=dict)


def _jumps_in_own_types(node: onnx.NodeProto, given: dict[str, np.ndarray], produced: dict[str, np.ndarray],
                        model: onnx.ModelProto, types: dict[str, np.dtype]) -> list[str]:
    """The outputs of a step (Floor, a comparison, a Cast to integers) that jump when its float64
    inputs are held in the types the model declares for them (float32): `Floor(x / 0.1)` at 0.7 is 6
    in float64 and 7 in float32, and no reference can say which a float32 model means."""
    with np.errstate(over="ignore"):  # beyond float32's range: its ±inf (IsInf after an overflow)
        held = {name: value.astype(types[name]).astype(np.float64) for name, value in given.items()
                if name in types and isinstance(value, np.ndarray) and value.dtype.kind == "f"}
    if not held:
        return []
    try:
        with np.errstate(all="ignore"):
            again = evaluate_node(float64_node(node), {**given, **held}, model)
    except Exception:  # noqa: BLE001 - it evaluated on the float64 values: nothing else to learn
        return []
    divisor = given.get(node.input[1]) if len(node.input) > 1 else None
    return [name for name, value in produced.items() if name in again and jumped(node, value, again[name], divisor)]


def storage_types(model: onnx.ModelProto) -> dict[str, np.dtype]:
    """The narrower float each tensor is declared in (FP16 in an FP16 copy, float32 in a float32
    model): what an engine keeps the tensor in between nodes."""
    typed = onnx.shape_inference.infer_shapes(model)
    declared = [(v.name, v.type.tensor_type.elem_type) for v in [*typed.graph.input, *typed.graph.value_info,
                                                                  *typed.graph.output]]
    declared += [(t.name, t.data_type) for t in model.graph.initializer]
    return {name: helper.tensor_dtype_to_np_dtype(kind) for name, kind in declared
            if kind in FLOAT_TYPES - {TensorProto.DOUBLE}}


def _in_own_types(node: onnx.NodeProto, given: dict[str, np.ndarray], model: onnx.ModelProto,
                  types: dict[str, np.dtype]) -> dict[str, np.ndarray] | None:
    """The node computed in the types the model declares (a float32 sum rounds as it adds: 1e8 + 1
    - 1e8 is 0), its outputs as float64; None where onnx.reference cannot compute it so."""
    typed = {name: value.astype(types[name]) if name in types and value.dtype == np.float64 else value
             for name, value in given.items()}
    try:
        with np.errstate(all="ignore"):
            return {name: as_float64(value) for name, value in evaluate_node(node, typed, model).items()}
    except Exception:  # noqa: BLE001 - the float64 evaluation, rounded, stands in
        return None


def float64_nodes(model: onnx.ModelProto, inputs: dict[str, np.ndarray], keep: bool = True, stored: bool = False,
                  narrow: bool = True
                  ) -> Iterator[tuple[int, onnx.NodeProto, dict[str, np.ndarray], dict[str, np.ndarray] | str]]:
    """(order, node, its float64 inputs, its float64 outputs or why it has none), node by node.
    keep=False frees each value after its last use (a forecast over a large model). stored=True:
    each node computed in the types the model declares (storage_types; where onnx.reference cannot,
    in float64 and its outputs rounded to them): what the model's own types give, numpy's way.
    narrow=False: a Cast to FP16/BF16 is not rounded (an FP16 copy's casts are the conversion's, held
    apart from the casts a model has of its own)."""
    types = storage_types(model) if stored else {}
    values = {name: as_float64(array) for name, array in inputs.items()}
    values.update({t.name: as_float64(numpy_helper.to_array(t)) for t in model.graph.initializer})
    reads = [node_inputs(node) for node in model.graph.node]
    last_use = {name: order for order, names in enumerate(reads) for name in names}
    source_types = _cast_source_types(model)
    for order, node in enumerate(model.graph.node):
        absent = [name for name in reads[order] if name not in values]
        given = {name: values[name] for name in reads[order] if name in values}
        if absent:
            yield order, node, given, f"no float64 value for its input {absent[0]!r}"
        else:
            source_type = source_types.get(node.input[0]) if node.op_type == "Cast" else None
            if casts_to_string(node) and source_type:  # Cast(to=STRING): the model's own float
                given = {**given, node.input[0]: given[node.input[0]].astype(helper.tensor_dtype_to_np_dtype(source_type))}
            try:
                produced = (stored and _in_own_types(node, given, model, types)) or \
                    _narrowed(node, given, evaluate_node(float64_node(node, narrow), given, model), narrow, source_type)
                _all_float64(produced)
                with np.errstate(over="ignore"):  # stored: beyond the type's range is its ±inf
                    produced = {k: v.astype(types[k]).astype(np.float64) if k in types and isinstance(v, np.ndarray)
                                and v.dtype == np.float64 else v for k, v in produced.items()}
            except Exception as exc:  # noqa: BLE001 - any failure: this node has no float64 reference
                yield order, node, given, f"no float64 reference for {node.op_type}: {type(exc).__name__}: {exc}"[:300]
            else:
                values.update(produced)
                yield order, node, given, produced
        if not keep:
            for name in [n for n in reads[order] if last_use.get(n) == order]:
                values.pop(name, None)


def inlined(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its local functions (onnxscript's, a function-preserving exporter's) written
    out as their nodes: made float64, made FP16 and checked node by node like any other."""
    return onnx.inliner.inline_local_functions(model) if model.functions else model


def evaluated_form(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as its float64 evaluation and its check read it: inlined; each CastLike whose
    target's type shape inference knows written as the Cast it is (widening the target to float64
    would take the narrowing with it: 16777217 cast like a float32 stayed 16777217, issue 41, sweep
    13 F1; torch.onnx's dynamo exporter writes CastLike for `x.to(y.dtype)` and Python scalars); and
    a Cast of a float32 to FLOAT in a branch or body, which _rounding_cast would round though float64
    held it exactly, written as the Identity it is (sweep 13 F6: (x + 1e8) - 1e8 passed at 0)."""
    model = densified(inlined(model))
    inner = [node for outer in model.graph.node for graph in subgraphs(outer) for node in every_node(graph)]
    if not any(node.op_type == "CastLike" for node in every_node(model.graph)) and not any(
            node.op_type == "Cast" and _cast_to(node) == TensorProto.FLOAT for node in inner):
        return model
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - without types the nodes stay as they are
        return model
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)  # not through bytes: a model past protobuf's 2 GB has none
    _rewrite_casts(rewritten.graph, inferred.graph, {})
    return rewritten


def _rewrite_casts(graph: onnx.GraphProto, inferred: onnx.GraphProto, outer: dict[str, int]) -> None:
    """evaluated_form's rewrites in `graph` and its subgraphs, each value's type looked up in its own
    scope first (`inferred`, the same graph with shape inference's types), then the enclosing ones:
    two sibling branches may each hold a value of one name and another type (sweep 14 G2)."""
    types = {**outer, **{v.name: v.type.tensor_type.elem_type for v in [*inferred.input, *inferred.value_info, *inferred.output]
                         if v.type.tensor_type.elem_type}, **{t.name: t.data_type for t in inferred.initializer}}
    for node, typed in zip(graph.node, inferred.node):
        if node.op_type == "CastLike" and len(node.input) > 1 and node.input[1] in types:
            node.op_type, target = "Cast", node.input[1]
            del node.input[1:]
            node.attribute.append(helper.make_attribute("to", types[target]))
        if node.op_type == "Cast" and _cast_to(node) == TensorProto.FLOAT and types.get(node.input[0]) == TensorProto.FLOAT:
            node.op_type = "Identity"
            del node.attribute[:]
        for inner, inner_typed in zip(subgraphs(node), subgraphs(typed)):
            _rewrite_casts(inner, inner_typed, types)


def densified(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its sparse weights (`sparse_initializer`, `Constant(sparse_value)`) as the dense
    tensors they stand for: the float64 evaluation reads dense ones alone, and their consumer had
    none (issue 41, sweep 13 F13)."""
    sparse_constants = [node for node in every_node(model.graph) if node.op_type == "Constant"
                        and any(a.name == "sparse_value" for a in node.attribute)]
    if not model.graph.sparse_initializer and not sparse_constants:
        return model
    dense = onnx.ModelProto()
    dense.CopyFrom(model)
    dense.graph.initializer.extend(numpy_helper.from_array(_dense_array(t), t.values.name) for t in dense.graph.sparse_initializer)
    del dense.graph.sparse_initializer[:]
    for node in every_node(dense.graph):
        given = next((a for a in node.attribute if a.name == "sparse_value"), None) if node.op_type == "Constant" else None
        if given is not None:
            array = _dense_array(given.sparse_tensor)
            node.attribute.remove(given)
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(array)))
    return dense


def _dense_array(sparse: onnx.SparseTensorProto) -> np.ndarray:
    """A sparse tensor's values at its indices (linear, [NNZ], or one row per value, [NNZ, rank])."""
    values, indices = numpy_helper.to_array(sparse.values), numpy_helper.to_array(sparse.indices)
    array = np.zeros(tuple(sparse.dims), dtype=values.dtype)
    if indices.ndim == 1:
        array.reshape(-1)[indices] = values
    else:
        array[tuple(indices.T)] = values
    return array


def _all_float64(produced: dict) -> None:
    """Raises where a float output of the float64 evaluation is narrower: onnx.reference computed it
    so whatever its inputs (TreeEnsembleClassifier sums its scores in float32: 1e8 + 1.5 - 1e8 was 0
    in the reference too, and onnxruntime passed at 0: issue 41, sweep 14 G12). Such a node has no
    float64 evaluation, and says why."""
    narrow = sorted(name for name, value in produced.items() if isinstance(value, np.ndarray)
                    and value.dtype.kind == "f" and value.dtype != np.float64)
    if narrow:
        raise TypeError(f"onnx.reference computes {', '.join(map(repr, narrow))} in "
                        f"{produced[narrow[0]].dtype}, not float64")


def _cast_to(node: onnx.NodeProto) -> int | None:
    return next((a.i for a in node.attribute if a.name == "to"), None)


def _narrowing_target(node: onnx.NodeProto) -> int | None:
    """The type a Cast (`to`) or a DequantizeLinear (`output_dtype`) gives its output, or None."""
    named = {"Cast": "to", "DequantizeLinear": "output_dtype"}.get(node.op_type)
    return next((a.i for a in node.attribute if a.name == named), None)


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for inner in subgraphs(node):
            yield from _graphs(inner)


def float64_values(model: onnx.ModelProto, inputs: dict[str, np.ndarray], keep: bool = True,
                   each: Callable[[int, onnx.NodeProto, dict, dict | str], None] | None = None,
                   stored: bool = False, narrow: bool = True) -> Float64Values:
    """Every value (keep=False: the graph's outputs only, intermediates freed after their last use),
    and which nodes have none. `each` sees every node's inputs and outputs as they are made (the
    FP16 forecast reads the same pass); `stored`, `narrow`: see float64_nodes."""
    model = evaluated_form(model)
    graph_outputs = {o.name for o in model.graph.output}
    wanted = None if keep else graph_outputs
    # A graph input or a weight that is also an output (no node makes it) is its own value.
    result = Float64Values({name: as_float64(array) for name, array in inputs.items() if keep or name in wanted})
    result.values.update({t.name: as_float64(numpy_helper.to_array(t)) for t in model.graph.initializer
                          if t.name in graph_outputs and t.name not in inputs})
    decided: dict[str, str] = {}  # value → the step node rounding decides it at, upstream
    steps_before: dict[str, frozenset[int]] = {}  # value → the steps in result.steps upstream of it
    types = None  # the declared float types, looked up at the first step
    for order, node, given, outputs in float64_nodes(model, inputs, keep=keep, stored=stored, narrow=narrow):
        if each is not None:
            each(order, node, given, outputs)
        if isinstance(outputs, str):
            result.missing[node_label(node, order)] = outputs
            continue
        # a sequence is a value of the nodes that read it, never a graph output's tensor
        result.values.update({k: v for k, v in outputs.items() if (wanted is None or k in wanted)
                              and not (k in graph_outputs and isinstance(v, list))})
        reads = node_inputs(node)
        before = frozenset().union(*(steps_before.get(name, ()) for name in reads))
        if step := next((decided[name] for name in reads if name in decided), None):
            decided.update(dict.fromkeys(node.output, step))
        elif node.op_type in INSIDE:
            try:  # a model shape inference refuses: its subgraphs are not traced (its steps say why, as before)
                types = storage_types(model) if types is None else types
            except Exception:  # noqa: BLE001
                pass
            inside = decided_inside(node, given, model, types or {}, node_label(node, order), float64_values)
            decided.update(inside)
            result.inside.update(inside)
            if not inside and holds_a_step(node):  # a step in it may hang on what float32 rounded outside (M13)
                result.steps[order] = outputs
                before |= {order}
        elif is_step(node, outputs) and any(isinstance(value, np.ndarray) and value.dtype.kind == "f"
                                            for value in given.values()):
            types = storage_types(model) if types is None else types  # shape inference: once, and only here
            if jumps := _jumps_in_own_types(node, given, outputs, model, types):
                decided.update(dict.fromkeys(jumps, f"{node_label(node, order)} ({node.op_type})"))
            elif node.op_type not in SELECTING:  # SELECTING's note
                result.steps[order] = outputs
                before |= {order}
        if before:
            steps_before.update(dict.fromkeys(node.output, before))
    result.decided = {name: decided[name] for name in graph_outputs if name in decided}
    result.upstream = {name: steps_before[name] for name in graph_outputs if name in steps_before}
    return result
