"""Issue 41, the fifteenth to seventeenth sweeps: verdicts that lied at trtmatrix's own edges, each
reproduced through real `trtmatrix run` processes on a real onnxruntime venv; each test failed on
main 13d3344 (the seventeenth's on 9ffba8f)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto as T, helper, numpy_helper

from conftest import PROFILES, matrix_file
from matrix.store import cell_file, list_runs, read_run
from matrix.worker.files import OUTPUTS
from test_sweep_five_texts_and_waits import save, trtmatrix

# A registry of one entry without an optimisation of its own: the Pad → MaxPool pattern, known bad on 1.20.
PAD_MAXPOOL = '''[[issue]]
id = "my-pad-maxpool"
title = "Pad(0) fused into MaxPool"
fault = { op = "MaxPool", after = "Pad" }
engine = "onnxruntime"
versions = ">=1.17.0,<1.32.0"
expected = "fail"
reported = "mine"
source = "none"
'''


def test_a_failure_of_constants_beside_a_pattern_is_not_the_patterns(tmp_path, cache_dir):
    """Sweep 16 J2: y = Concat(MaxPool(Pad(x, 0)), Cast(Cast(Cast(c, INT32), BOOL), FLOAT)), c a constant
    in (-1, 1), x positive (the zero padding never wins). With optimisations off onnxruntime 1.20 runs
    no fusion, and its Cast chain makes 0.5 a 1: the whole error is the chain's. The chain read no
    graph input, so it was not "beside" the pattern, and the cell was the Pad → MaxPool entry's xfail. J13:
    `repro` took the chain for a constant the engine never computed, and cut nothing."""
    (tmp_path / "known_issues.toml").write_text(PAD_MAXPOOL)
    c = np.array([0.5, -0.25, 0.75, 0.1, -0.9, 0.3], np.float32).reshape(1, 1, 2, 3)
    x = np.abs(np.random.default_rng(2).standard_normal((1, 1, 5, 5))).astype(np.float32) + 1
    nodes = [helper.make_node("Pad", ["x", "pads", "zero"], ["p"]),
             helper.make_node("MaxPool", ["p"], ["mp"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Cast", ["c"], ["ci"], to=T.INT32), helper.make_node("Cast", ["ci"], ["cb"], to=T.BOOL),
             helper.make_node("Cast", ["cb"], ["cf"], to=T.FLOAT), helper.make_node("Concat", ["mp", "cf"], ["y"], axis=2)]
    body = PROFILES + '[profiles.noopt]\nprecision = "fp32"\noptimization = "off"\n' + save(
        tmp_path, "m", nodes, [("x", T.FLOAT, [1, 1, 5, 5])], [("y", T.FLOAT, [1, 1, 5, 3])],
        {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "zero": np.array(0, np.float32), "c": c}, {"x": x}) \
        + 'profiles = ["noopt"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.20",), cases_dir=tmp_path)
    done = trtmatrix("run", "-c", str(config))
    cell = read_run(list_runs(tmp_path / "reports")[-1]).set_index("cell_id").loc["m/noopt/ort-1.20"]
    assert (cell["verdict"], cell["status"]) == ("fail", "fail"), (cell["faults"], cell["fault_observed"])
    assert json.loads(cell["faults"])["my-pad-maxpool"]["beside"] == {"y": "Cast#2 (Cast)"}
    assert "the pattern's own output (mp) was observed right on this engine" in done.stderr, done.stderr
    # sweep 16 J18: the remembered reach, edited ("beside" emptied, the model's identity kept), turned it to xfail
    memo = next((cache_dir / "faults").glob(f"{cell['artifact']}.model.onnx.*.json"))
    kept = json.loads(memo.read_text())
    kept["value"]["my-pad-maxpool"]["beside"] = {}
    memo.write_text(json.dumps(kept))
    again = trtmatrix("run", "-c", str(config))
    assert read_run(list_runs(tmp_path / "reports")[-1])["status"].tolist() == ["fail"], again.stdout + again.stderr
    # sweep 16 J13: repro said the chain "is a constant: its value changed before the engine computed anything",
    # and shipped the whole model: with optimisations off onnxruntime computes the chain itself
    repro = trtmatrix("repro", "m/noopt/ort-1.20", "-c", str(config), "-o", str(tmp_path / "repro"))
    assert repro.returncode == 0 and "reduced from 6 to 3 nodes" in repro.stdout + repro.stderr, repro.stdout + repro.stderr


def _ml_scaler(folder, x: np.ndarray, c: np.ndarray) -> str:
    """y = Scaler(x int64) - c: ai.onnx.ml's Scaler gives float whatever its input."""
    graph = helper.make_graph([helper.make_node("Scaler", ["x"], ["sc"], domain="ai.onnx.ml", offset=[0.0], scale=[1.0]),
                               helper.make_node("Sub", ["sc", "c"], ["y"])], "scaler",
                              [helper.make_tensor_value_info("x", T.INT64, list(x.shape))],
                              [helper.make_tensor_value_info("y", T.FLOAT, list(x.shape))], [numpy_helper.from_array(c, "c")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
                                ir_version=8), folder / "scaler.onnx")
    np.savez(folder / "scaler_in.npz", x=x)
    return f'[cases.scaler]\nonnx = "{folder / "scaler.onnx"}"\ninputs = "{folder / "scaler_in.npz"}"\nprofiles = ["fp32"]\n'


def _audio_front_end(folder, signal: np.ndarray) -> str:
    """A log-mel front end as speech exports write it: HannWindow → STFT → power → MelWeightMatrix → Log."""
    ints = {"wl": 400, "ax2": [2], "step": 160, "axm1": [-1], "nmel": 20, "dftlen": 400, "sr": 16000}
    nodes = [helper.make_node("HannWindow", ["wl"], ["win"], periodic=1), helper.make_node("Unsqueeze", ["sig", "ax2"], ["sig3"]),
             helper.make_node("STFT", ["sig3", "step", "win", "wl"], ["spec"], onesided=1),
             helper.make_node("Mul", ["spec", "spec"], ["sq"]), helper.make_node("ReduceSum", ["sq", "axm1"], ["pw"], keepdims=0),
             helper.make_node("MelWeightMatrix", ["nmel", "dftlen", "sr", "lo", "hi"], ["mel"]),
             helper.make_node("MatMul", ["pw", "mel"], ["melpw"]), helper.make_node("Add", ["melpw", "eps"], ["mp"]),
             helper.make_node("Log", ["mp"], ["y"])]
    return save(folder, "audio", nodes, [("sig", T.FLOAT, list(signal.shape))], [("y", T.FLOAT, [1, 8, 20])],
                {**{k: np.array(v, np.int64) for k, v in ints.items()}, "lo": np.array(20, np.float32),
                 "hi": np.array(8000, np.float32), "eps": np.array([1e-6], np.float32)}, {"sig": signal}) + \
        'profiles = ["fp32", "fp16"]\n'


def _tree(folder, x: np.ndarray) -> str:
    """y = TreeEnsembleRegressor(x · 0.1f): one split at 0.7f, leaves 1 and 2 (a scaler written as Mul)."""
    tree = helper.make_node("TreeEnsembleRegressor", ["f"], ["y"], domain="ai.onnx.ml", n_targets=1,
                            nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                            nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.7, 0.0, 0.0],
                            nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                            target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[1.0, 2.0])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "tenth"], ["f"]), tree], "tree",
                              [helper.make_tensor_value_info("x", T.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", T.FLOAT, [x.shape[0], 1])],
                              [numpy_helper.from_array(np.array([0.1], np.float32), "tenth")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
                                ir_version=8), folder / "tree.onnx")
    np.savez(folder / "tree_in.npz", x=x)
    return f'[cases.tree]\nonnx = "{folder / "tree.onnx"}"\ninputs = "{folder / "tree_in.npz"}"\nprofiles = ["fp32"]\n'


def _bodies(folder, tenth: np.ndarray) -> str:
    """Sweep 17's subgraphs holding Floor(x / 0.1f), which flips at 0.7 (6 in float64, 7 in float32):
    a Loop's carried sum (and the same away from the flip), an If in a Loop's body, a Scan's body, and
    a while-Loop (`acc += 0.1 while acc < 0.3`) inside the branch an If takes."""
    v = lambda name, kind, shape: helper.make_tensor_value_info(name, kind, shape)  # noqa: E731
    floor = [helper.make_node("Div", ["x", "tenth"], ["q"]), helper.make_node("Floor", ["q"], ["f"])]
    counted = [v("i", T.INT64, []), v("c_in", T.BOOL, []), v("acc_in", T.FLOAT, [3])]
    keep = helper.make_node("Identity", ["c_in"], ["c_out"])

    def loop(name: str, inner: list, x: list[float]) -> str:
        body = helper.make_graph([*inner, helper.make_node("Add", ["acc_in", "f"], ["acc_out"]), keep], "body", counted,
                                 [v("c_out", T.BOOL, []), v("acc_out", T.FLOAT, [3])])
        return save(folder, name, [helper.make_node("Loop", ["n", "c0", "a0"], ["y"], body=body)], [("x", T.FLOAT, [3])],
                    [("y", T.FLOAT, [3])], {"n": np.array(2, np.int64), "c0": np.array(True), "a0": np.zeros(3, np.float32),
                                            "tenth": tenth, "yes": np.array(True)}, {"x": np.array(x, np.float32)}) + 'profiles = ["fp32"]\n'
    branch = lambda nodes, out, shape=(3,): helper.make_graph(nodes, "b", [], [v(out, T.FLOAT, shape)])  # noqa: E731
    in_if = [helper.make_node("If", ["yes"], ["f"], then_branch=branch(floor, "f"),
                                 else_branch=branch([helper.make_node("Neg", ["x"], ["n1"])], "n1"))]
    scan_body = helper.make_graph([*floor, helper.make_node("Add", ["s_in", "f"], ["s_out"]),
                                   helper.make_node("Identity", ["f"], ["f_out"])], "scan",
                                  [v("s_in", T.FLOAT, []), v("x", T.FLOAT, [])], [v("s_out", T.FLOAT, []), v("f_out", T.FLOAT, [])],
                                  [numpy_helper.from_array(tenth.reshape(()), "tenth")])
    scan = save(folder, "scanned", [helper.make_node("Scan", ["s0", "xs"], ["total", "each"], body=scan_body, num_scan_inputs=1)],
                [("s0", T.FLOAT, []), ("xs", T.FLOAT, [3])], [("total", T.FLOAT, []), ("each", T.FLOAT, [3])], {},
                {"s0": np.array(0, np.float32), "xs": np.array([0.7, 0.2, 1.5], np.float32)}) + 'profiles = ["fp32"]\n'
    counting = helper.make_graph([helper.make_node("Add", ["a_in", "tenth"], ["a_out"]),
                                  helper.make_node("Less", ["a_out", "limit"], ["c_out"])], "count",
                                 [v("i", T.INT64, []), v("c_in", T.BOOL, []), v("a_in", T.FLOAT, [])],
                                 [v("c_out", T.BOOL, []), v("a_out", T.FLOAT, [])])
    taken = branch([helper.make_node("Loop", ["", "yes", "a0"], ["acc"], body=counting)], "acc", ())
    while_in_if = save(folder, "while_in_if", [helper.make_node("If", ["yes"], ["y"], then_branch=taken,
                                                                else_branch=branch([helper.make_node("Identity", ["a0"], ["same"])], "same", ()))],
                       [("a0", T.FLOAT, [])], [("y", T.FLOAT, [])],
                       {"yes": np.array(True), "tenth": np.array(0.1, np.float32), "limit": np.array(0.3, np.float32)},
                       {"a0": np.array(0, np.float32)}) + 'profiles = ["fp32"]\n'
    def counting_loop(name: str, trips: int, scale: float) -> str:
        """acc += 0.1f `trips` times; each iteration's Floor(acc / 0.1f) · scale as a scan output."""
        body = helper.make_graph([helper.make_node("Add", ["acc_in", "tenth"], ["acc_out"]),
                                  helper.make_node("Div", ["acc_out", "tenth"], ["q"]), helper.make_node("Floor", ["q"], ["f"]),
                                  helper.make_node("Mul", ["f", "scale"], ["step"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
                                 "count", [v("i", T.INT64, []), v("c_in", T.BOOL, []), v("acc_in", T.FLOAT, [])],
                                 [v("c_out", T.BOOL, []), v("acc_out", T.FLOAT, []), v("step", T.FLOAT, [])])
        return save(folder, name, [helper.make_node("Loop", ["n", "", "a0"], ["acc", "steps"], body=body)],
                    [("a0", T.FLOAT, [])], [("acc", T.FLOAT, []), ("steps", T.FLOAT, [trips])],
                    {"n": np.array(trips, np.int64), "tenth": np.array(0.1, np.float32), "scale": np.array(scale, np.float32)},
                    {"a0": np.array(0, np.float32)}) + 'profiles = ["fp32"]\n'
    return loop("loop_floor", floor, [0.7, 0.2, 1.5]) + loop("loop_away", floor, [0.75, 0.2, 1.25]) \
        + save(folder, "long_sum", [helper.make_node("Loop", ["n", "", "a0"], ["acc"], body=helper.make_graph(
            [helper.make_node("Add", ["acc_in", "tenth"], ["acc_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
            "sum", [v("i", T.INT64, []), v("c_in", T.BOOL, []), v("acc_in", T.FLOAT, [])],
            [v("c_out", T.BOOL, []), v("acc_out", T.FLOAT, [])]))], [("a0", T.FLOAT, [])], [("acc", T.FLOAT, [])],
               {"n": np.array(800, np.int64), "tenth": np.array(0.1, np.float32)}, {"a0": np.array(0, np.float32)}) \
        + 'profiles = ["fp32"]\n' + counting_loop("late_flip", 30, 1.0) + counting_loop("late_tiny", 30, 1e-7) \
        + save(folder, "body_underflow", [helper.make_node("Loop", ["one_trip", ""], ["ys"], body=helper.make_graph(
            [helper.make_node("Mul", [a, b], [c]) for a, b, c in (("x", "k1", "p"), ("p", "k2", "q"), ("q", "k3", "r"),
                                                                  ("r", "k3", "y"))]
            + [helper.make_node("Identity", ["c_in"], ["c_out"])], "flush", [v("i", T.INT64, []), v("c_in", T.BOOL, [])],
            [v("c_out", T.BOOL, []), v("y", T.FLOAT, [4])]))], [("x", T.FLOAT, [4])], [("ys", T.FLOAT, [1, 4])],
               {"one_trip": np.array(1, np.int64), **{k: np.array(c, np.float32) for k, c in
                                                      (("k1", 1e-30), ("k2", 1e-20), ("k3", 1e25))}},
               {"x": np.array([0.5, 1, 2, 3], np.float32)}) + 'profiles = ["fp32"]\n' \
        + save(folder, "loop_cancel", [helper.make_node("Loop", ["two", ""], ["vs"], body=helper.make_graph(
            [helper.make_node("Add", ["one", "tiny"], ["up"]), helper.make_node("Sub", ["up", "one"], ["v"]),
             helper.make_node("Identity", ["c_in"], ["c_out"])], "cancel", [v("i", T.INT64, []), v("c_in", T.BOOL, [])],
            [v("c_out", T.BOOL, []), v("v", T.FLOAT, [1])]))], [("x", T.FLOAT, [1])], [("vs", T.FLOAT, [2, 1])],
               {"two": np.array(2, np.int64), "one": np.ones(1, np.float32), "tiny": np.array([2.0 ** -26], np.float32)},
               {"x": np.zeros(1, np.float32)}) + 'profiles = ["fp32"]\n' \
        + save(folder, "sign_outer", [helper.make_node("Add", ["one", "tiny"], ["up"]), helper.make_node("Sub", ["up", "one"], ["v"]),
                                      helper.make_node("Loop", ["two", ""], ["ys"], body=helper.make_graph(
                                          [helper.make_node("Sign", ["v"], ["s"]), helper.make_node("Add", ["s", "x"], ["y"]),
                                           helper.make_node("Identity", ["c_in"], ["c_out"])], "signs",
                                          [v("i", T.INT64, []), v("c_in", T.BOOL, [])], [v("c_out", T.BOOL, []), v("y", T.FLOAT, [1])]))],
               [("x", T.FLOAT, [1])], [("ys", T.FLOAT, [2, 1])],
               {"two": np.array(2, np.int64), "one": np.ones(1, np.float32), "tiny": np.array([2.0 ** -26], np.float32)},
               {"x": np.zeros(1, np.float32)}) + 'profiles = ["fp32"]\n' \
        + save(folder, "grid_nearest", [helper.make_node("Mul", ["s", "tenth"], ["gx"]),
                                        helper.make_node("Concat", ["gx", "zero"], ["g2"], axis=0),
                                        helper.make_node("Reshape", ["g2", "gshape"], ["grid"]),
                                        helper.make_node("GridSample", ["img", "grid"], ["y"], mode="nearest", align_corners=0)],
               [("img", T.FLOAT, [1, 1, 1, 4]), ("s", T.FLOAT, [1])], [("y", T.FLOAT, [1, 1, 1, 1])],
               {"tenth": tenth, "zero": np.zeros(1, np.float32), "gshape": np.array([1, 1, 1, 2], np.int64)},
               {"img": np.array([[[[0, 10, 20, 30]]]], np.float32), "s": np.array([5], np.float32)}) + 'profiles = ["fp32"]\n' \
        + loop("loop_if", in_if, [0.7, 0.2, 1.5]) + scan + while_in_if


def _int_rule(folder) -> str:
    """Sweep 18 L16: o = i + 1 (int64) judged by a cosine rule against a file one integer off."""
    np.savez(folder / "int_rule_expected.npz", o=np.array([2, 3, 5], np.int64))
    return save(folder, "int_rule", [helper.make_node("Add", ["i", "one"], ["o"])], [("i", T.INT64, [3])],
                [("o", T.INT64, [3])], {"one": np.array([1], np.int64)}, {"i": np.array([1, 2, 3], np.int64)}) \
        + f'profiles = ["fp32"]\nexpected = "{folder / "int_rule_expected.npz"}"\n[cases.int_rule.accept.fp32]\ncosine = 0.99\n'


def _pooled(folder) -> str:
    """Sweep 18 L20: hidden = 2x [batch, sequence, 4], pooled = mean over tokens [batch, 4], 4 tokens: the
    mask's shape [2, 4] is pooled's too; the file holds pooled 100 and 50 off at its last hidden unit."""
    x = np.random.default_rng(0).random((2, 4, 4), dtype=np.float32)
    attention = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.int64)
    pooled = (2 * x.astype(np.float64)).mean(axis=1) + np.array([[0, 0, 0, 100], [0, 0, 0, -50]])
    np.savez(folder / "pooled_expected.npz", hidden=2 * x, pooled=pooled.astype(np.float32))
    graph = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["hidden"]),
                               helper.make_node("ReduceMean", ["hidden"], ["pooled"], axes=[1], keepdims=0)], "pooled",
                              [helper.make_tensor_value_info("x", T.FLOAT, ["batch", "sequence", 4]),
                               helper.make_tensor_value_info("attention_mask", T.INT64, ["batch", "sequence"])],
                              [helper.make_tensor_value_info("hidden", T.FLOAT, ["batch", "sequence", 4]),
                               helper.make_tensor_value_info("pooled", T.FLOAT, ["batch", 4])],
                              [numpy_helper.from_array(np.array(2, np.float32), "two")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), folder / "pooled.onnx")
    np.savez(folder / "pooled_in.npz", x=x, attention_mask=attention)
    return (f'[cases.pooled]\nonnx = "{folder / "pooled.onnx"}"\ninputs = "{folder / "pooled_in.npz"}"\n'
            f'expected = "{folder / "pooled_expected.npz"}"\nmask = "attention_mask"\nprofiles = ["fp32"]\n')


def _third(folder) -> str:
    """Sweep 19 M16: y = Floor(x / 0.1f) at 0.7 (6 in float64, 7 in float32), an expected file of 100 there."""
    np.savez(folder / "third_expected.npz", y=np.array([100, 2, 3], np.float32))
    return save(folder, "third", [helper.make_node("Div", ["x", "tenth"], ["q"]), helper.make_node("Floor", ["q"], ["y"])],
                [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])], {"tenth": np.array([0.1], np.float32)},
                {"x": np.array([0.7, 0.25, 0.33], np.float32)}) \
        + f'profiles = ["fp32"]\nexpected = "{folder / "third_expected.npz"}"\n'


@pytest.fixture(scope="module")
def fifteen(tmp_path_factory, cache_dir):
    """One `trtmatrix run` (onnxruntime 1.32) of the fifteenth sweep's reference cases."""
    folder = tmp_path_factory.mktemp("sweep15")
    rng = np.random.default_rng(0)
    tenth, milli = np.array([0.1], np.float32), np.array([0.001], np.float32)
    w1, w2 = (rng.standard_normal((16, 32)) * 0.01).astype(np.float32), (rng.standard_normal((32, 8)) * 0.1).astype(np.float32)
    mlp = save(folder, "elu", [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Elu", ["h"], ["e"]),
                               helper.make_node("MatMul", ["e", "w2"], ["y"])],
               [("x", T.FLOAT, [4, 16])], [("y", T.FLOAT, [4, 8])], {"w1": w1, "w2": w2},
               {"x": (rng.standard_normal((4, 16)) * 0.01).astype(np.float32)}) + 'profiles = ["fp32"]\n'
    big = np.array([16777216, 16777216, 33554432, 0], np.float32)
    dequantized = save(folder, "dq", [helper.make_node("DequantizeLinear", ["b", "s", "zp"], ["d"]),
                                      helper.make_node("Sub", ["d", "c"], ["y"])],
                       [("b", T.INT32, [4])], [("y", T.FLOAT, [4])],
                       {"s": np.array(1, np.float32), "zp": np.array(0, np.int32), "c": big},
                       {"b": np.array([16777217, 16777219, 33554435, 5], np.int32)}) + 'profiles = ["fp32"]\n'
    n = 96
    sampled = save(folder, "grid", [helper.make_node("GridSample", ["x", "g"], ["y"], align_corners=0)],
                   [("x", T.FLOAT, [1, 3, n, n]), ("g", T.FLOAT, [1, n, n, 2])], [("y", T.FLOAT, [1, 3, n, n])], {},
                   {"x": rng.random((1, 3, n, n), dtype=np.float32), "g": rng.random((1, n, n, 2), dtype=np.float32) * 2 - 1}) \
        + 'profiles = ["fp32"]\ntimeout_s = 2\n'
    bucket = save(folder, "bucket", [helper.make_node("Div", ["x", "tenth"], ["q"]), helper.make_node("Floor", ["q"], ["f"]),
                                     helper.make_node("Mul", ["f", "milli"], ["y"])], [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])],
                    {"tenth": tenth, "milli": milli}, {"x": np.array([0.7, 1.9, 3e5, 12.0], np.float32)}) + 'profiles = ["fp32"]\n'
    text = save(folder, "text", [helper.make_node("Mul", ["x", "tenth"], ["s"]), helper.make_node("Mul", ["s", "three"], ["t"]),
                                 helper.make_node("Cast", ["t"], ["y"], to=T.STRING)], [("x", T.FLOAT, [4])],
                [("y", T.STRING, [4])], {"tenth": tenth, "three": np.array([3], np.float32)},
                {"x": np.array([0.7, 0.3, 1.9, 0.09], np.float32)}) + 'profiles = ["fp32"]\n'
    nan = save(folder, "nan", [helper.make_node("Sqrt", ["x"], ["y"])], [("x", T.FLOAT, [1, 4]), ("m", T.INT64, [1, 4])],
               [("y", T.FLOAT, [1, 4])], {}, {"x": np.array([[-1, -4, 25, 9]], np.float32), "m": np.array([[1, 1, 0, 0]])}) \
        + 'profiles = ["fp32"]\nmask = "m"\n'
    positions = save(folder, "positions", [helper.make_node("Cast", ["ids"], ["fi"], to=T.FLOAT),
                                           helper.make_node("Cast", ["q"], ["fq"], to=T.FLOAT),
                                           helper.make_node("Sub", ["fi", "fq"], ["d"]), helper.make_node("Mul", ["d", "half"], ["y"])],
                     [("ids", T.INT64, [4]), ("q", T.INT64, [1])], [("y", T.FLOAT, [4])], {"half": np.array([0.5], np.float32)},
                     {"ids": np.array([2049, 2050, 2051, 2053]), "q": np.array([2048])}) + 'profiles = ["fp16"]\n'
    running = save(folder, "running", [helper.make_node("CumSum", ["x", "axis"], ["y"])], [("x", T.FLOAT, [1, 100000])],
                   [("y", T.FLOAT, [1, 100000])], {"axis": np.array(1, np.int64)},
                   {"x": rng.random((1, 100000), dtype=np.float32)}) + 'profiles = ["fp32"]\n'
    scaled = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Cast", ["shape"], ["size"], to=T.FLOAT),
              helper.make_node("Div", ["target", "size"], ["scales"])]
    nearest = save(folder, "nearest", [*scaled, helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest",
                                                                 coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
                   [("x", T.FLOAT, [1, 1, 1, 14])], [("y", T.FLOAT, [1, 1, 1, 16])], {"target": np.array([1, 1, 1, 16], np.float32)},
                   {"x": np.arange(14, dtype=np.float32).reshape(1, 1, 1, 14)}) + 'profiles = ["fp32"]\n'
    length = save(folder, "length", [*scaled, helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
                  [("x", T.FLOAT, [1, 1, 1, 7])], [("y", T.FLOAT, [1, 1, 1, None])], {"target": np.array([1, 1, 1, 31], np.float32)},
                  {"x": np.linspace(0, 1, 7, dtype=np.float32).reshape(1, 1, 1, 7)}) + 'profiles = ["fp32"]\n'
    branch = lambda op: helper.make_graph([helper.make_node(op, ["q"], ["b"])], op,  # noqa: E731
                                          [], [helper.make_tensor_value_info("b", T.FLOAT, [4])])
    branched = save(folder, "branched", [helper.make_node("Div", ["x", "tenth"], ["q"]), helper.make_node("Size", ["x"], ["n"]),
                                         helper.make_node("Greater", ["n", "zero"], ["c"]),
                                         helper.make_node("If", ["c"], ["y"], then_branch=branch("Floor"),
                                                          else_branch=branch("Ceil"))],
                    [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], {"tenth": tenth, "zero": np.array(0, np.int64)},
                    {"x": np.array([0.7, 0.3, 1.9, 0.25], np.float32)}) + 'profiles = ["fp32"]\n'
    kept = []
    for name, idx in (("nzneither", [[0, 1, 2]]), ("nzfloat64", [[3]])):  # neither side, and the float64 side
        np.savez(folder / f"{name}_expected.npz", idx=np.array(idx, np.int64))
        kept.append(save(folder, name, [helper.make_node("Mul", ["x", "tenth"], ["s"]),
                                        helper.make_node("GreaterOrEqual", ["s", "thr"], ["keep"]),
                                        helper.make_node("NonZero", ["keep"], ["idx"])],
                         [("x", T.FLOAT, [4])], [("idx", T.INT64, [1, None])], {"tenth": tenth, "thr": np.array([0.3], np.float32)},
                         {"x": np.array([1, 2, 3, 4], np.float32)})
                    + f'profiles = ["fp32"]\nexpected = "{folder / f"{name}_expected.npz"}"\n')
    body = PROFILES + "".join(kept) + branched + mlp + dequantized + sampled + bucket + text + nan + positions + running + nearest + length \
        + _tree(folder, np.array([[7.0], [2.0], [9.0]], np.float32)) \
        + save(folder, "invalid", [helper.make_node("Concat", ["x", "c"], ["y"], axis=2)], [("x", T.FLOAT, [1, 1, 3, 3])],
               [("y", T.FLOAT, [1, 1, 6, 3])], {"c": np.zeros((1, 1, 3, 2), np.float32)},
               {"x": np.ones((1, 1, 3, 3), np.float32)}) + 'profiles = ["fp32"]\n' + _ml_scaler(folder, np.array([[16777217, 16777219, 3]], np.int64), np.array([[16777216, 16777216, 0]], np.float32)) \
        + _audio_front_end(folder, (rng.standard_normal((1, 1600)) * 0.1).astype(np.float32)) + _bodies(folder, tenth) \
        + save(folder, "cubic", [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic")],
               [("x", T.FLOAT, [1, 3, 64, 64])], [("y", T.FLOAT, [1, 3, 107, 87])], {"sizes": np.array([1, 3, 107, 87])},
               {"x": rng.random((1, 3, 64, 64), dtype=np.float32)}) + 'profiles = ["fp32"]\n' \
        + save(folder, "underflow", [helper.make_node("Mul", [x, k], [y]) for x, k, y in
                                     (("x", "a", "p"), ("p", "b", "q"), ("q", "c", "r"), ("r", "d", "y"))],
               [("x", T.FLOAT, [2])], [("y", T.FLOAT, [2])],
               {k: np.array(v, np.float32) for k, v in (("a", 1e-30), ("b", 1e-20), ("c", 1e30), ("d", 1e20))},
               {"x": np.array([1, 2], np.float32)}) + 'profiles = ["fp32"]\n' \
        + '[profiles.keepmul]\nprecision = "fp16"\nkeep_fp32 = ["Mul"]\n[profiles.keepless]\nprecision = "fp16"\n' \
          'keep_fp32 = ["Less"]\n' \
        + save(folder, "unnamed", [helper.make_node("Less", ["x", "thr"], ["b"]), helper.make_node("Mul", ["x", "two"], ["y"])],
               [("x", T.FLOAT, [3])], [("b", T.BOOL, [3]), ("y", T.FLOAT, [3])],
               {"thr": np.array([0.50001], np.float32), "two": np.array([2], np.float32)},
               {"x": np.array([0.5, 0.2, 0.9], np.float32)}) + 'profiles = ["keepmul", "keepless"]\n' \
        + save(folder, "loud_input", [helper.make_node("Mul", ["x", "k"], ["y"])], [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])],
               {"k": np.array([1.0001], np.float32)}, {"x": np.array([1.0001, 70000, 3.14159], np.float32)}) \
        + 'profiles = ["fp16"]\n' + _int_rule(folder) + _pooled(folder) + _third(folder)

    config = matrix_file(folder, cache_dir, body, environments=("ort-1.32",), cases_dir=folder)
    done = trtmatrix("run", "-c", str(config))
    return done, read_run(list_runs(folder / "reports")[-1]).set_index("cell_id")


def test_a_step_in_a_loops_or_a_scans_body_is_named_and_a_right_engine_never_fails(fifteen):
    """Sweep 17 K12, K3, K10: Floor(x / 0.1f) in a Loop's body (alone, or in an If there) or a Scan's
    flips at 0.7, and onnxruntime, right for a float32 model, was `FAIL 2.00e+00` against float64 (K11:
    its check said "agrees … at every node": the Loop's bound counted the flip as its conditioning).
    K4: a while-Loop in an If's branch was a parting that named no step."""
    done, cells = fifteen
    named = {"loop_floor": "Floor#1 (Floor) in the body of Loop#0 (its iteration 1)",
             "loop_if": "Floor#1 (Floor) in the then_branch of If#0 in the body of Loop#0 (its iteration 1)",
             "scanned": "Floor#1 (Floor) in the body of Scan#0 (its iteration 1)",
             "while_in_if": "Less#1 (Less) in the body of Loop#0 (its iteration 3) in the then_branch of If#0"}
    for case, step in named.items():
        cell = cells.loc[f"{case}/fp32/ort-1.32"]
        assert cell["status"] == "disputed" and f"is decided by rounding at node {step}" in cell["error"], cell["error"]
        assert not cell["reference_check"].startswith("agrees"), cell["reference_check"]
    # away from the flip (0.75): the same Loop is judged, and the engine passes
    away = cells.loc["loop_away/fp32/ort-1.32"]
    assert (away["status"], away["reference_check"].startswith("agrees")) == ("pass", True), away["reference_check"]


def test_keep_fp32_by_op_type_keeps_only_those_nodes_of_a_model_without_node_names(fifteen):
    """Sweep 18 L22: Less(x, 0.50001) and Mul(x, 2), nodes unnamed (onnx.helper's way): 0.50001 is 0.5 in
    FP16, so Less flips at 0.5 unless it stays FP32. keep_fp32 = ["Mul"] passed (every unnamed node shares
    the name '', so Less was kept too), and ["Less"] "matches no layer"."""
    _, cells = fifteen
    assert cells.loc["unnamed/keepmul/ort-1.32", "status"] == "fail", cells.loc["unnamed/keepmul/ort-1.32", "error"]
    assert cells.loc["unnamed/keepless/ort-1.32", "status"] == "pass", cells.loc["unnamed/keepless/ort-1.32", "error"]


def test_an_fp16_input_beyond_65504_is_the_cause_before_a_constants_rounding(fifteen):
    """Sweep 18 L24: x holds 70000, which the FP16 copy's input cast makes inf before any node runs; the
    cause said was the constant 1.0001's rounding (7 off) and "the engine is inf from the copy"."""
    _, cells = fifteen
    loud = cells.loc["loud_input/fp16/ort-1.32"]
    assert loud["status"] == "fail" and loud["error"].startswith("input 'x' holds 7e+04, beyond FP16's 65504"), loud["error"]


def test_a_mask_leaves_alone_an_output_whose_axes_the_model_names_otherwise(fifteen):
    """Sweep 18 L20: the mask [batch, sequence] applied to pooled [batch, 4] because 4 tokens met 4 hidden
    units; its last unit, 100 off in the file, was left out, and the cell passed."""
    _, cells = fifteen
    pooled = cells.loc["pooled/fp32/ort-1.32"]
    outputs = {o["name"]: o for o in json.loads(pooled["outputs"])}
    assert pooled["status"] == "fail" and outputs["pooled"]["max_abs"] == pytest.approx(100, rel=1e-5), outputs
    assert (outputs["pooled"]["left_out"], outputs["hidden"]["left_out"]) == (0, 3 * 4)  # tokens still masked


def test_an_expected_file_on_neither_side_of_a_step_is_not_said_to_hold_one(fifteen):
    """Sweep 19 M16: the file's 100, where the step gives 6 or 7, was "your expected file holds one side"."""
    _, cells = fifteen
    third = cells.loc["third/fp32/ort-1.32"]
    assert third["status"] == "fail" and "holds one side" not in str(third["error"]), third["error"]


def test_a_cosine_rule_over_integers_alone_measures_no_cosine(fifteen):
    """Sweep 18 L16: a cosine rule's fail line quoted "measured cosine 0.99408", taken over the integer
    output the rule compares exactly (cos([2, 3, 4], [2, 3, 5]) is above its 0.99)."""
    done, cells = fifteen
    rule = cells.loc["int_rule/fp32/ort-1.32"]
    assert rule["status"] == "fail" and pd.isna(rule["cosine"]), rule["cosine"]
    assert "measured no cosine (no floating output)" in done.stderr and "0.99408" not in done.stderr, done.stderr


def test_a_value_float32_flushes_to_zero_is_the_models_own_arithmetic(fifteen):
    """Sweep 18 L2: x · 1e-30 · 1e-20 · 1e30 · 1e20 is 0 in float32 (1e-50 flushes) and x in float64; a
    right engine failed by 2, and no node parted (1e-50 is within a subnormal's spacing of 0)."""
    _, cells = fifteen
    flushed = cells.loc["underflow/fp32/ort-1.32"]
    assert flushed["status"] == "disputed", flushed["error"]
    assert "falls below float32's smallest normal value (1.18e-38) at node Mul#1 (Mul)" in flushed["error"]


def test_a_cubic_resize_to_sizes_is_bound_by_its_float32_coordinates(fifteen):
    """Sweep 17 K5: a cubic Resize of a 64×64 image to sizes 107×87 was `disputed` (|Δ| 7e-6 where
    rounding explained 1e-6): onnxruntime computes the coordinates in float32 (the scale 107/64 too),
    which moves each value by the coordinate's rounding times the image's slope."""
    _, cells = fifteen
    cubic = cells.loc["cubic/fp32/ort-1.32"]
    assert (cubic["status"], cubic["reference_check"].startswith("agrees")) == ("pass", True), cubic["reference_check"]


def test_a_loops_float32_state_is_rounding_not_a_misread_node(fifteen):
    """Sweep 19 M1: acc += 0.1f 800 times is 0.00065 from float64, float32's own accumulation; the Loop's
    bound knew one iteration, and the cell was a parting. M2: Floor(acc / 0.1f) flips where the float32
    sum has drifted (each iteration's float64 state held in float32 does not flip): a parting that named no
    step; scaled by 1e-7, within tolerance, it is a pass."""
    _, cells = fifteen
    acc32, acc64, first = np.float32(0), 0.0, None  # numpy's own float32 and float64 runs of the body
    for iteration in range(1, 31):
        acc32, acc64 = np.float32(acc32 + np.float32(0.1)), acc64 + float(np.float32(0.1))
        if first is None and np.floor(acc32 / np.float32(0.1)) != np.floor(acc64 / float(np.float32(0.1))):
            first = iteration
    long_sum = cells.loc["long_sum/fp32/ort-1.32"]  # its own float32 arithmetic, judged: within tolerance of float64
    assert long_sum["status"] == "pass" and "is its own float32 arithmetic at node Loop#0 (Loop)" in \
        long_sum["reference_check"], long_sum["reference_check"]
    # sweep 20 N3: x · 1e-30 · 1e-20 · 1e25 · 1e25 in a Loop's body (0 in float32) failed every engine
    flushed = cells.loc["body_underflow/fp32/ort-1.32"]
    assert flushed["status"] == "disputed" and "is its own float32 arithmetic at node Loop#0 (Loop)" in flushed["error"], \
        flushed["error"]
    late = cells.loc["late_flip/fp32/ort-1.32"]
    assert late["status"] == "disputed" and \
        f"at node Floor#2 (Floor) in the body of Loop#0 (its iteration {first})" in late["error"], (first, late["error"])
    assert cells.loc["late_tiny/fp32/ort-1.32", "status"] == "pass", cells.loc["late_tiny/fp32/ort-1.32", "error"]


def test_a_bodys_cancellation_is_rounding_and_a_nearest_pixel_is_a_step(fifteen):
    """Sweep 19 M15: (1 + 2**-26) - 1 in a Loop's body is 0 in float32 and 1.5e-8 in float64: a parting,
    the Loop's bound taken from its output (1.5e-8), not from what its body reads (1); M13: a Sign in the
    body of what float32 rounded to 0 outside failed every engine by 1. M14: GridSample
    picks pixel 2 in float32 (5 · 0.1f is 0.5) and 3 in float64: every engine failed by 10."""
    _, cells = fifteen
    cancel = cells.loc["loop_cancel/fp32/ort-1.32"]
    assert cancel["status"] == "pass" and "its own float32 arithmetic" in cancel["reference_check"], cancel["reference_check"]
    # M13: Sign(v) in a Loop's body, v = (1 + 2**-26) - 1 made outside it: 0 in float32, 1 in float64
    outer = cells.loc["sign_outer/fp32/ort-1.32"]
    assert outer["status"] == "disputed" and "decided by rounding at node Loop#2 (Loop)" in outer["error"], outer["error"]
    nearest = cells.loc["grid_nearest/fp32/ort-1.32"]
    assert nearest["status"] == "disputed" and "decided by rounding at node GridSample#3 (GridSample)" in nearest["error"], \
        nearest["error"]


def test_kernels_whose_rounding_is_of_their_range_are_judged(fifteen):
    """Sweep 15 H1: Elu of activations near 1e-5 (a freshly initialised MLP) is exp(x) - 1 in float32,
    2,300 units of its own small value off: the check disputed a right engine. H13: a 400-term STFT is
    a sum (its bound had none), and the FP16 copy of the front end failed the checker (its window and
    mel ops name their output type in an attribute the converter left FLOAT)."""
    done, cells = fifteen
    assert cells.loc["elu/fp32/ort-1.32", "status"] == "pass", cells.loc["elu/fp32/ort-1.32", "reference_check"]
    audio = cells.loc["audio/fp32/ort-1.32"]
    assert (audio["status"], audio["reference_check"].startswith("agrees")) == ("pass", True), audio["reference_check"]
    assert cells.loc["audio/fp16/ort-1.32", "status"] == "pass", cells.loc["audio/fp16/ort-1.32", "error"]


def test_integers_read_as_float32_are_rounded_in_the_reference(fifteen):
    """Sweep 15 H2: an int32 past 2^24 dequantized is float32 in the model (16777217 is 16777216), then a
    cancellation: the reference kept the integer and a right engine failed by 1. H3: ai.onnx.ml's Scaler
    of int64, float by its schema: onnx.reference kept the int64 and the check called that a parting."""
    _, cells = fifteen
    for cell in ("dq/fp32/ort-1.32", "scaler/fp32/ort-1.32"):
        assert (cells.loc[cell, "status"], cells.loc[cell, "max_abs"]) == ("pass", 0.0), cells.loc[cell, "reference_check"]


def test_a_grid_sample_onnx_reference_takes_minutes_over_keeps_the_rows_deadline(fifteen):
    """Sweep 15 H9: onnx.reference samples a GridSample pixel by pixel in Python (192 × 192: minutes),
    and no deadline stopped it: timeout_s did nothing, and the run hung."""
    done, cells = fifteen
    grid = cells.loc["grid/fp32/ort-1.32"]
    assert grid["status"] == "no_reference" and "not evaluated in float64 within timeout_s = 2 s" in grid["error"], grid["error"]
    assert "a GridSample" in grid["error"]


def test_steps_and_texts_at_their_edges(fifteen):
    """Sweep 15 H7: Floor(x / 0.1f) · 0.001 flips at 0.7 (a bucket id), beside a 3e5 whose output, 300,
    made every flip of 1e-3 "rounding" (8 units of the largest value): a right engine failed. H8 (in
    part): float32 arithmetic before a Cast to STRING decides which number is written: disputed at the
    Cast (a step, or the two evaluations' own ways of writing a float32, which are compared as texts),
    never an engine's failure."""
    _, cells = fifteen
    bucket = cells.loc["bucket/fp32/ort-1.32"]
    assert bucket["status"] == "disputed" and "decided by rounding at node Floor#1" in bucket["reference_check"], \
        (bucket["status"], bucket["reference_check"])
    text = cells.loc["text/fp32/ort-1.32"]
    assert text["status"] == "disputed" and "Cast#2 (Cast)" in text["reference_check"], \
        (text["status"], text["reference_check"])


def test_nan_under_a_mask_running_sums_and_integer_casts_of_the_fp16_copy(fifteen):
    """Sweep 15 H12: Sqrt of negatives where the mask keeps, positives where it leaves out: the kept
    reference is NaN everywhere, and a NaN output "matched" it (pass). H15: a CumSum of 100,000 values
    is a sum of as many terms (its bound counted one). H14: the FP16 copy casts 2049 to FLOAT16, 2048:
    the conversion's own error is 0.5, which it said was 0."""
    _, cells = fifteen
    nan = cells.loc["nan/fp32/ort-1.32"]
    assert nan["status"] == "error" and "NaN everywhere" in nan["error"], (nan["status"], nan["error"])
    assert cells.loc["running/fp32/ort-1.32", "status"] == "pass", cells.loc["running/fp32/ort-1.32", "reference_check"]
    positions = cells.loc["positions/fp16/ort-1.32"]
    assert positions["conversion_max_abs"] == 0.5, positions[["conversion_max_abs", "copy_max_abs", "error"]].to_dict()


def test_an_investigation_of_a_run_whose_model_was_edited_since_is_refused(tmp_path, cache_dir):
    """Sweep 16 J3, J4, J7: the run judged Pad(0) → MaxPool (failing on onnxruntime 1.20); the user then
    edited the model. `repro` wrote an ISSUE.md of the new model beside the run's numbers of the old one
    (or said "passes … nothing wrong to reproduce" of a cell the run shows failing), and `bisect` kept a
    "first good" in the run that its model never had."""
    x = -np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)
    shapes = ([("x", T.FLOAT, [1, 1, 5, 5])], [("y", T.FLOAT, [1, 1, 3, 3])])
    pads = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "zero": np.array(0, np.float32)}
    pool = [helper.make_node("Pad", ["x", "pads", "zero"], ["p"]),
            helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    body = PROFILES + save(tmp_path, "m", pool, *shapes, pads, {"x": x}) + 'profiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.20",), cases_dir=tmp_path)
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    assert read_run(list_runs(tmp_path / "reports")[-1])["status"].tolist() == ["fail"]  # 1.20's Pad fusion
    pool[1] = helper.make_node("AveragePool", ["p"], ["y"], kernel_shape=[3, 3], strides=[2, 2])
    save(tmp_path, "m", pool, *shapes, pads, {"x": x})
    for command in (["repro", "m/fp32/ort-1.20", "-o", str(tmp_path / "repro")], ["bisect", "m/fp32", "--good", "1.32.0",
                                                                                   "--bad", "1.20.1"]):
        done = trtmatrix(*command, "-c", str(config))
        assert done.returncode == 2 and "on another model or other inputs than matrix.toml names now" in done.stderr, \
            (command, done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert not (tmp_path / "repro").exists()


def test_a_damaged_staged_worker_is_staged_again(tmp_path, cache_dir):
    """Sweep 16 J6: the cache's staged worker cut short (a full disk) made every cell `error`, run after
    run, with advice to add "ImportError: …" to the image's requirements; venvs and artifacts were
    checked and made again, the worker was not."""
    from matrix.environments.staging import PACKAGE_NAME, stage_worker, worker_hash

    body = PROFILES + save(tmp_path, "r", [helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])],
                           [("y", T.FLOAT, [3])], {}, {"x": np.array([-1, 0, 2], np.float32)}) + 'profiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.32",), cases_dir=tmp_path)
    staged = stage_worker(cache_dir) / PACKAGE_NAME / "cell.py"
    staged.write_text("")
    done = trtmatrix("run", "-c", str(config), "--no-reuse")
    assert done.returncode == 0 and read_run(list_runs(tmp_path / "reports")[-1])["status"].tolist() == ["pass"], \
        done.stdout[-2000:] + done.stderr[-2000:]
    assert f"the staged worker {staged.parent} is not trtmatrix's worker (a file differs); staged again" in done.stderr
    assert staged.read_text() and (cache_dir / "worker" / worker_hash()[:16]).is_dir()


def test_a_moved_checkout_whose_matrix_gained_a_comment_keeps_its_gate(tmp_path, cache_dir):
    """Sweep 16 J12: a project moved (a new CI checkout path) whose matrix file gained one comment in the
    same commit was "made from another matrix file": its real regression (a model onnxruntime 1.20
    gets wrong) was not compared with the night before, and the run exited 0."""
    from conftest import REPO, TOLERANCES

    first = tmp_path / "checkout-1"
    first.mkdir()
    x = -np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)
    shapes = ([("x", T.FLOAT, [1, 1, 5, 5])], [("y", T.FLOAT, [1, 1, 3, 3])])
    pool = {"kernel_shape": [3, 3], "strides": [2, 2]}
    save(first, "m", [helper.make_node("MaxPool", ["x"], ["y"], pads=[1, 1, 1, 1], **pool)], *shapes, {}, {"x": x})
    (first / "matrix.toml").write_text(
        f'[run]\nenvironments = ["ort-1.20"]\ncases_dir = "."\nimages_dir = "{REPO / "images"}"\ncache_dir = "{cache_dir}"\n'
        + TOLERANCES + PROFILES + '[cases.m]\nonnx = "m.onnx"\ninputs = "m_in.npz"\nprofiles = ["fp32"]\n')
    assert trtmatrix("run", "-c", str(first / "matrix.toml")).returncode == 0
    second = first.rename(tmp_path / "checkout-2")
    with (second / "matrix.toml").open("a") as text:
        text.write("# moved to the new runner\n")
    save(second, "m", [helper.make_node("Pad", ["x", "pads", "zero"], ["p"]), helper.make_node("MaxPool", ["p"], ["y"], **pool)],
         *shapes, {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "zero": np.array(0, np.float32)}, {"x": x})
    done = trtmatrix("run", "-c", str(second / "matrix.toml"))
    assert done.returncode == 1 and "1 cell newly fails" in done.stderr and "another matrix file" not in done.stderr, \
        done.stderr[-3000:]


def test_a_registry_entry_corrected_since_the_run_matches_no_more_at_report(tmp_path, cache_dir):
    """Sweep 16 J15: an entry's pattern corrected (same id, AveragePool for MaxPool) kept its match when
    `trtmatrix report` re-judged the run ("none changed"), an `xfail` for a pattern the model does not
    hold; the next run said `fail` of the very same outputs. J24: an Identity between the Pad and the
    MaxPool hid the pattern (onnxruntime removes it, then fuses): `fail`, no entry named."""
    (tmp_path / "known_issues.toml").write_text(PAD_MAXPOOL)
    x = -np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)
    body = PROFILES + save(tmp_path, "m", [helper.make_node("Pad", ["x", "pads", "zero"], ["p"]),
                                           helper.make_node("Identity", ["p"], ["i"]),  # an exporter's: J24
                                           helper.make_node("MaxPool", ["i"], ["y"], kernel_shape=[3, 3], strides=[2, 2])],
                           [("x", T.FLOAT, [1, 1, 5, 5])], [("y", T.FLOAT, [1, 1, 3, 3])],
                           {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "zero": np.array(0, np.float32)}, {"x": x}) \
        + 'profiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.20",), cases_dir=tmp_path)
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    run = list_runs(tmp_path / "reports")[-1]
    assert read_run(run)["status"].tolist() == ["xfail"]
    (tmp_path / "known_issues.toml").write_text(PAD_MAXPOOL.replace('op = "MaxPool"', 'op = "AveragePool"'))
    done = trtmatrix("report", run.name, "-c", str(config))
    assert done.returncode == 0 and read_run(run)["status"].tolist() == ["fail"], done.stdout + done.stderr


def test_a_neighbour_a_length_and_a_leaf_picked_by_float32_values_are_steps(fifteen):
    """Sweep 15 H4, H5: scales an exporter computes (size / Shape(x)) are 16/14 in float64 and
    1.1428572f in float32: nearest picks another neighbour at column 8, and linear's output length
    floor(7 · 31f/7f) is 30 where float64 says 31. H11: 7 · 0.1f is above the split 0.7f in float64 and
    on it in float32: another leaf. A right engine failed, by a pixel, by its shape, by a leaf."""
    _, cells = fifteen
    for cell, node in (("nearest/fp32/ort-1.32", "Resize#3"), ("length/fp32/ort-1.32", "Resize#3"),
                       ("tree/fp32/ort-1.32", "TreeEnsembleRegressor#1")):
        assert cells.loc[cell, "status"] == "disputed" and f"decided by rounding at node {node}" in \
            cells.loc[cell, "reference_check"], (cells.loc[cell, "status"], cells.loc[cell, "reference_check"])


def test_a_reference_rotted_in_place_is_prepared_again(tmp_path, cache_dir):
    """Sweep 16 J19: one byte of a cached reference.npz flipped, its size and time kept (a disk's bit
    rot): its remembered digest was trusted, every later run errored the cells ("Bad CRC-32"), and the
    gate called it the engine's regression, run after run."""
    import os

    body = PROFILES + save(tmp_path, "rot", [helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [64])],
                           [("y", T.FLOAT, [64])], {}, {"x": np.linspace(-1, 1, 64, dtype=np.float32)}) \
        + 'profiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.32",), cases_dir=tmp_path)
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    artifact = Path(read_run(list_runs(tmp_path / "reports")[-1])["artifact"].iloc[0])
    reference = cache_dir / "artifacts" / artifact.name / "reference.npz"
    stat, data = reference.stat(), bytearray(reference.read_bytes())
    data[-200] ^= 0xFF  # inside the array's bytes
    with reference.open("r+b") as file:  # in place: the inode the run folders link to
        file.write(data)
    os.utime(reference, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 0 and read_run(list_runs(tmp_path / "reports")[-1])["status"].tolist() == ["pass"], \
        done.stdout[-2000:] + done.stderr[-2000:]
    assert "reference.npz is not the file prepared (its digest differs); prepared again" in done.stderr, done.stderr


def test_summary_diff_and_history_of_a_run_rejudged_with_a_what_if_say_so(tmp_path, cache_dir):
    """Sweep 16 J14, J16: a run re-judged with a looser tolerance file (a what-if) showed as the night's
    pass in `history`, and `summary` (release notes) and `diff` said "passes" with no word of the file;
    sweep 18 L13: so did the reports folder's index.html."""
    from test_sweep_nine_regression_check import near_case

    config = matrix_file(tmp_path, cache_dir, PROFILES + near_case(tmp_path), environments=("ort-1.20", "ort-1.32"),
                         cases_dir=tmp_path)
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    run = list_runs(tmp_path / "reports")[-1]
    (tmp_path / "loose.toml").write_text("[cases.near.tolerances.fp32]\natol = 1.0\nrtol = 0.0\n")
    assert trtmatrix("report", run.name, "-c", str(config), "--tolerances", str(tmp_path / "loose.toml")).returncode == 0
    said = f"run {run.name} was re-judged with {(tmp_path / 'loose.toml').resolve()} (trtmatrix report)"
    summary = trtmatrix("summary", "-c", str(config))
    assert summary.returncode == 0 and said in summary.stdout and said in summary.stderr, summary.stdout + summary.stderr
    for command in ("diff", "history"):
        done = trtmatrix(command, "-c", str(config))
        assert done.returncode == 0 and said in done.stderr, (command, done.stdout, done.stderr)
    assert f"{run.name[:15]} (re-judged)" in trtmatrix("history", "-c", str(config)).stdout
    # sweep 19 M12: tolerances suggest took the what-if's verdicts and tolerances as the run's own
    suggested = trtmatrix("tolerances", "suggest", "-c", str(config), "--trusted", "ort-1.32")
    assert suggested.returncode == 0 and suggested.stdout.startswith(f"# {said}") and said in suggested.stderr, \
        suggested.stdout + suggested.stderr
    # sweep 18 L13: the reports folder's front page showed the what-if's verdicts as the run's own
    index = (tmp_path / "reports" / "index.html").read_text()
    assert f'{run.name}</a> <span title="{said}' in index, index


def test_an_invalid_model_is_said_invalid_not_lacking_an_expected_file(fifteen):
    """Sweep 16 J20: a Concat of [1, 1, 3, 3] and [1, 1, 3, 2] on axis 2 (the checker's default pass takes
    it; onnxruntime refuses to load it) was "no float64 evaluation for Concat … give the case `expected`
    outputs", which no file could mend."""
    _, cells = fifteen
    invalid = cells.loc["invalid/fp32/ort-1.32"]
    assert invalid["status"] == "no_reference" and "the model is not valid at Concat (node Concat#0)" in invalid["error"] \
        and "`expected`" not in invalid["error"], invalid["error"]


def test_a_patterns_error_is_credited_only_where_carried_through_it_fails_the_output(tmp_path, cache_dir):
    """Sweep 16 J8: MaxPool(Pad(x, 0)) · 1000 on x near -1e-5: the fusion's 1.3e-5 is below the tolerance
    at the pattern and 1.3e-2 after the Mul, all of the failure: it was "observed right … something else".
    J9: Where(mask, MaxPool(Pad(x, 0)), Cast chain(z)) takes none of the fusion's wrong elements; the
    failure is the chain's, and it was the entry's xfail because the pattern's tensor was off somewhere.
    J23: the observed copies of a run killed meanwhile stayed in the cache for good. Sweep 17 K9:
    MaxPool(Pad(x, 0)) + AveragePool(Pad(x2, 0)), whose fused pad onnxruntime 1.20 also leaves out of the
    count (a fault not in the registry): the entry's 0.56 was credited with the cell's 44. K13: the trials'
    digests, fault-pattern memos and locks stayed in the cache."""
    (tmp_path / "known_issues.toml").write_text(PAD_MAXPOOL)
    rng = np.random.default_rng(3)
    pads = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "zero": np.array(0, np.float32)}
    pool = [helper.make_node("Pad", ["x", "pads", "zero"], ["p"]),
            helper.make_node("MaxPool", ["p"], ["mp"], kernel_shape=[3, 3], strides=[2, 2])]
    image, out = ("x", T.FLOAT, [1, 1, 5, 5]), ("y", T.FLOAT, [1, 1, 3, 3])
    body = PROFILES + save(tmp_path, "amp", [*pool, helper.make_node("Mul", ["mp", "k"], ["y"])], [image], [out],
                           {**pads, "k": np.array(1000, np.float32)},
                           {"x": (-1e-5 * rng.uniform(1, 2, (1, 1, 5, 5))).astype(np.float32)}) + 'profiles = ["fp32"]\n'
    centre = np.zeros((1, 1, 3, 3), bool)
    centre[0, 0, 1, 1] = True  # the one window without padding
    body += save(tmp_path, "where", [*pool, helper.make_node("Cast", ["z"], ["zi"], to=T.INT32),
                                     helper.make_node("Cast", ["zi"], ["zb"], to=T.BOOL),
                                     helper.make_node("Cast", ["zb"], ["zf"], to=T.FLOAT),
                                     helper.make_node("Where", ["centre", "mp", "zf"], ["y"])],
                 [image, ("z", T.FLOAT, [1, 1, 3, 3])], [out], {**pads, "centre": centre},
                 {"x": -rng.uniform(0.1, 1, (1, 1, 5, 5)).astype(np.float32),
                  "z": rng.uniform(-0.9, 0.9, (1, 1, 3, 3)).astype(np.float32)}) + 'profiles = ["fp32"]\n'
    body += save(tmp_path, "second", [*pool, helper.make_node("Pad", ["x2", "pads", "zero"], ["p2"]),
                                      helper.make_node("AveragePool", ["p2"], ["ap"], kernel_shape=[3, 3], strides=[2, 2]),
                                      helper.make_node("Add", ["mp", "ap"], ["y"])],
                 [image, ("x2", T.FLOAT, [1, 1, 5, 5])], [out], pads,
                 {"x": -rng.uniform(0.1, 1, (1, 1, 5, 5)).astype(np.float32),
                  "x2": rng.uniform(50, 100, (1, 1, 5, 5)).astype(np.float32)}) + 'profiles = ["fp32"]\n'
    gelu = helper.make_graph([*pool, helper.make_node("Gelu", ["mp"], ["y"], domain="com.microsoft")], "ms_after",
                             [helper.make_tensor_value_info(*image)], [helper.make_tensor_value_info(*out)],
                             [numpy_helper.from_array(v, k) for k, v in pads.items()])
    onnx.save(helper.make_model(gelu, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                                ir_version=8), tmp_path / "ms_after.onnx")
    np.savez(tmp_path / "ms_after_in.npz", x=(np.random.default_rng(3).standard_normal((1, 1, 5, 5)) - 1).astype(np.float32))
    body += f'[cases.ms_after]\nonnx = "{tmp_path / "ms_after.onnx"}"\ninputs = "{tmp_path / "ms_after_in.npz"}"\nprofiles = ["fp32"]\n'
    z = np.full((1, 1, 3, 3), 0.25, np.float32)
    z[0, 0, 1, 1] = 0.7  # Floor(0.7f / 0.1f): 6 in float64, 7 in float32
    body += save(tmp_path, "stepped", [*pool, helper.make_node("Div", ["z", "tenth"], ["q"]),
                                       helper.make_node("Floor", ["q"], ["f"]), helper.make_node("Add", ["mp", "f"], ["y"])],
                 [image, ("z", T.FLOAT, [1, 1, 3, 3])], [out], {**pads, "tenth": np.array([0.1], np.float32)},
                 {"x": (np.random.default_rng(3).standard_normal((1, 1, 5, 5)) - 1).astype(np.float32), "z": z}) \
        + 'profiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.20",), cases_dir=tmp_path)
    # sweep 16 J23: what a run killed (kill -9) while it observed left: a copy of the model, never removed
    left = cache_dir / "investigations" / "known-issue-patterns" / "20261127T000000.000Z-dead" / "0"
    left.mkdir(parents=True)
    (left / "model.onnx").write_bytes(b"a user's model")
    done = trtmatrix("run", "-c", str(config))
    assert not left.parent.exists() and not list((cache_dir / "locks").glob("known-issue-patterns-*"))
    cells = read_run(list_runs(tmp_path / "reports")[-1]).set_index("case")
    assert (cells.loc["amp", "status"], cells.loc["amp", "known_issue"]) == ("xfail", "my-pad-maxpool"), \
        cells.loc["amp", "fault_observed"]
    assert (cells.loc["where", "verdict"], cells.loc["where", "status"]) == ("fail", "fail"), cells.loc["where", "fault_observed"]
    assert ("where/fp32/ort-1.20: known issue my-pad-maxpool's pattern is in the model, but y also reads Cast#2 (Cast) "
            "beside it: the pattern's own output (mp) was off on this engine") in done.stderr, done.stderr
    second = cells.loc["second"]
    observed = json.loads(second["fault_observed"])["my-pad-maxpool"]
    assert (second["status"], observed["explains"]) == ("fail", False) and second["max_abs"] > 10 * observed["max_abs"], observed
    assert "it does not give the cell's outputs (within its tolerance)" in done.stderr, done.stderr
    # sweep 19 M19: a com.microsoft op after the pattern (no float64 evaluation) ended the observation, "KeyError: 'y'"
    assert (cells.loc["ms_after", "status"], cells.loc["ms_after", "known_issue"]) == ("xfail", "my-pad-maxpool"), \
        cells.loc["ms_after", "fault_observed"]
    # sweep 19 M10: the step's element, where the cell holds float32's side, was held to the carried float64 side
    assert (cells.loc["stepped", "status"], cells.loc["stepped", "known_issue"]) == ("xfail", "my-pad-maxpool"), \
        cells.loc["stepped", "fault_observed"]
    left = [p.name for folder in ("faults", "digests", "locks", "artifacts") for p in (cache_dir / folder).glob("*observed*")]
    assert not left, left


def test_a_run_folder_that_lost_its_digests_is_not_rejudged_unchecked(tmp_path, cache_dir):
    """Sweep 16 J21: digests.json deleted and a cell's stored outputs replaced by right ones: `report`
    re-judged the fail as a pass, silently."""
    body = PROFILES + save(tmp_path, "r", [helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])],
                           [("y", T.FLOAT, [3])], {}, {"x": np.array([-1, 0, 2], np.float32)})
    np.savez(tmp_path / "r_expected.npz", y=np.array([0, 0, 3], np.float32))  # the engine is 1 off against it
    body += f'profiles = ["fp32"]\nexpected = "{tmp_path / "r_expected.npz"}"\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.32",), cases_dir=tmp_path)
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    run = list_runs(tmp_path / "reports")[-1]
    (run / "digests.json").unlink()
    for cell in (run / "cells").glob("*.npz"):
        cell.unlink()
        np.savez(cell, y=np.array([0, 0, 3], np.float32))
    done = trtmatrix("report", run.name, "-c", str(config))
    assert done.returncode == 2 and "digests.json: is missing, so the run's stored outputs cannot be checked" in done.stderr, \
        done.stdout + done.stderr
    assert read_run(run)["status"].tolist() == ["fail"]


def test_a_step_in_an_if_branch_is_traced(fifteen):
    """Sweep 15 H6: q = x / 0.1f, then If(Size(x) > 0) whose branch is Floor(q): 0.7 / 0.1f is 7 in
    float32 and 6.9999998 in float64, a step float32 rounding decides, disputed outside an If; inside
    one the If was one node, agreeing, and a right engine failed."""
    _, cells = fifteen
    branched = cells.loc["branched/fp32/ort-1.32"]
    assert branched["status"] == "disputed" and "decided by rounding at node Floor#0 (Floor) in the then_branch of If#3" \
        in branched["reference_check"], (branched["status"], branched["reference_check"])


def test_a_file_holding_neither_side_of_a_step_is_not_said_to_hold_one(fifteen):
    """Sweep 15 H10: NonZero(x · 0.1f >= 0.3f) keeps [2, 3] in float32 and [3] in float64; an expected file
    of [0, 1, 2] holds neither, yet the cause said "your expected file holds one side, a float32 engine may
    give the other" (the step decides the output's length, so the whole output was settled)."""
    _, cells = fifteen
    said = "your expected file holds one side"
    assert said not in str(cells.loc["nzneither/fp32/ort-1.32", "error"]), cells.loc["nzneither/fp32/ort-1.32", "error"]
    assert said in str(cells.loc["nzfloat64/fp32/ort-1.32", "error"]), cells.loc["nzfloat64/fp32/ort-1.32", "error"]


def test_elements_no_step_decides_are_judged_and_a_flip_within_tolerance_passes(tmp_path, cache_dir):
    """Sweep 17 K6: y = Concat(MaxPool(Pad(x, 0)) flattened, Floor(s / 0.1f)), s = 0.7 flipping the last
    element: the whole output was `disputed`, on onnxruntime 1.20 too, whose fused Pad → MaxPool is
    wrong at elements every reference agrees on. K7: y = x + 1e-6 · Floor(s / 0.1f), a flip that
    moves y by 1e-6 against a tolerance of 1e-4, was `disputed` though either side passes; 1e-2 · the
    same flip is beyond it, and stays disputed. `report` re-judges them alike. Sweep 19 M5: an engine beyond
    both sides of a step (a dropped Cast adds 10 where Floor gives 6 or 7) was `disputed`, not `fail`."""
    x = (np.random.default_rng(3).standard_normal((1, 1, 6, 6)) - 1).astype(np.float32)
    s, tenth = np.array([0.7], np.float32), np.array([0.1], np.float32)
    step = [helper.make_node("Div", ["s", "tenth"], ["q"]), helper.make_node("Floor", ["q"], ["f"])]
    pooled = save(tmp_path, "pooled", [helper.make_node("Pad", ["x", "pads", "zero"], ["p"]),
                                       helper.make_node("MaxPool", ["p"], ["mp"], kernel_shape=[3, 3], strides=[2, 2]),
                                       helper.make_node("Reshape", ["mp", "nine"], ["flat"]), *step,
                                       helper.make_node("Concat", ["flat", "f"], ["y"], axis=0)],
                  [("x", T.FLOAT, [1, 1, 6, 6]), ("s", T.FLOAT, [1])], [("y", T.FLOAT, [10])],
                  {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "zero": np.array(0, np.float32),
                   "nine": np.array([9], np.int64), "tenth": tenth}, {"x": x, "s": s}) + 'profiles = ["fp32"]\n'
    small = [0.01, 0.02, 0.05]
    nudged = "".join(save(tmp_path, name, [*step, helper.make_node("Mul", ["f", "by"], ["m"]),
                                           helper.make_node("Add", ["v", "m"], ["y"])],
                          [("v", T.FLOAT, [3]), ("s", T.FLOAT, [1])], [("y", T.FLOAT, [3])],
                          {"tenth": tenth, "by": np.array([by], np.float32)},
                          {"v": np.array(small, np.float32), "s": s}) + 'profiles = ["fp32"]\n'
                     for name, by in (("nudged", 1e-6), ("pushed", 1e-2)))
    chained = save(tmp_path, "chained", [*step, helper.make_node("Cast", ["m"], ["mi"], to=T.INT32),
                                         helper.make_node("Cast", ["mi"], ["mb"], to=T.BOOL),
                                         helper.make_node("Cast", ["mb"], ["mf"], to=T.FLOAT),
                                         helper.make_node("Mul", ["mf", "ten"], ["t"]), helper.make_node("Add", ["f", "t"], ["y"])],
                   [("s", T.FLOAT, [3]), ("m", T.FLOAT, [3])], [("y", T.FLOAT, [3])],
                   {"tenth": tenth, "ten": np.array([10], np.float32)},
                   {"s": np.array([0.7, 0.25, 0.33], np.float32), "m": np.array([0.5, 0, 0], np.float32)}) + 'profiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, PROFILES + pooled + nudged + chained, environments=("ort-1.20",),
                         cases_dir=tmp_path)
    trtmatrix("run", "-c", str(config))
    run_dir = list_runs(tmp_path / "reports")[-1]
    cells = read_run(run_dir).set_index("case")
    fault = cells.loc["pooled"]
    with np.load(cell_file(run_dir, fault["content_key"], OUTPUTS)) as stored:
        engine = stored["y"].astype(np.float64)
    padded = np.pad(x[0, 0].astype(np.float64), 1)  # the zero padding counts: float64 max over each 3×3 window
    truth = np.array([padded[2 * i:2 * i + 3, 2 * j:2 * j + 3].max() for i in range(3) for j in range(3)])
    assert fault["status"] == "fail" and fault["error"].startswith("fails at elements no step decides"), fault["error"]
    assert fault["max_abs"] == pytest.approx(np.abs(engine[:9] - truth).max()) and fault["max_abs"] > 1e-2
    assert (cells.loc["nudged", "status"], cells.loc["pushed", "status"]) == ("pass", "disputed")
    # sweep 19 M5: onnxruntime 1.20 drops the chain's INT32 Cast (0.5 is True): 17 where the step gives 6 or 7
    chain = cells.loc["chained"]
    assert chain["status"] == "fail" and "beyond the tolerance of both its sides" in chain["error"], chain["error"]
    # the same rule in `report`: a tolerance of 1 takes the flip of 1e-2 and the fault
    config.write_text(config.read_text().replace("atol = 1e-4", "atol = 1.0", 1))
    again = trtmatrix("report", "-c", str(config))
    rejudged = read_run(run_dir).set_index("case")["status"].to_dict()
    assert rejudged == {"pooled": "pass", "nudged": "pass", "pushed": "pass", "chained": "fail"}, again.stdout + again.stderr
