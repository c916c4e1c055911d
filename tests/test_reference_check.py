"""Issue 40: a reference checked before anything is judged against it, and blame only where it is due.

Each model here once got a wrong verdict through `trtmatrix run` (main b722786): a reference of the
wrong shape or values (onnx.reference's GlobalMaxPool on 3-D input, its opset-9 BatchNormalization
with `momentum`, a node evaluated at the newest opset), no reference at all (a com.microsoft op), an
FP16 copy in an order onnxruntime cannot load (an If reading an outer value), a failure of the FP16
conversion blamed on the engine, and a user's wrong expected file blamed on the engine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from matrix.prepare.fp16_variant import topological_order
from matrix.reference import NoReference, onnx_reference
from matrix.store import list_runs, read_run
from test_bad_values import TRTMATRIX

ENV = "ort-1.20"
PROFILES = '[profiles.fp32]\nprecision = "fp32"\n[profiles.fp16]\nprecision = "fp16"\n'


def model(path, nodes, inputs, outputs, initializers=(), opset=13, domains=()):
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                         [h.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(initializers))
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", opset), *[h.make_opsetid(d, 1) for d in domains]],
                         ir_version=8)
    onnx.save(proto, path)
    return proto


def case(tmp_path, name, proto, inputs: dict, profiles=("fp32",), expected: dict | None = None) -> str:
    np.savez(tmp_path / f"{name}-in.npz", **inputs)
    extra = ""
    if expected is not None:
        np.savez(tmp_path / f"{name}-expected.npz", **expected)
        extra = f'expected = "{tmp_path / f"{name}-expected.npz"}"\n'
    return (f'[cases.{name}]\nonnx = "{tmp_path / f"{name}.onnx"}"\ninputs = "{tmp_path / f"{name}-in.npz"}"\n'
            f'profiles = {list(profiles)!r}\n'.replace("'", '"') + extra)


def run(write_matrix, body: str) -> tuple[subprocess.CompletedProcess, dict]:
    config = write_matrix(PROFILES + body, environments=(ENV,))
    done = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})
    assert done.returncode in (0, 1), done.stderr
    return done, read_run(list_runs(config.parent / "reports")[-1]).set_index("case").to_dict("index")


def _gmp(path):
    return model(path, [h.make_node("GlobalMaxPool", ["x"], ["p"]), h.make_node("Squeeze", ["p", "axes"], ["y"])],
                 [("x", T.FLOAT, [2, 5, 7])], [("y", T.FLOAT, [2, 5])], [nh.from_array(np.array([2], np.int64), "axes")])


def _batchnorm(path):
    rng = np.random.default_rng(1)
    stats = [nh.from_array(rng.random(3).astype(np.float32) + 0.5, n) for n in ("s", "b", "m", "v")]
    return model(path, [h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], momentum=0.9)],
                 [("x", T.FLOAT, [2, 3, 4, 4])], [("y", T.FLOAT, [2, 3, 4, 4])], stats, opset=12)


def _squeeze(path):
    return model(path, [h.make_node("Squeeze", ["x"], ["s"], axes=[0]),
                        h.make_node("Transpose", ["s"], ["y"], perm=[0, 3, 1, 2])],
                 [("x", T.FLOAT, [1, 1, 8, 4, 3])], [("y", T.FLOAT, [1, 3, 8, 4])], opset=12)


def _gelu(path):
    return model(path, [h.make_node("Gelu", ["x"], ["y"], domain="com.microsoft", name="gelu")],
                 [("x", T.FLOAT, [2, 8])], [("y", T.FLOAT, [2, 8])], opset=17, domains=["com.microsoft"])


def _as_string(path):
    return model(path, [h.make_node("Cast", ["x"], ["y"], to=T.STRING)], [("x", T.FLOAT, [3])], [("y", T.STRING, [3])])


def test_references_onnx_reference_got_wrong_are_right_and_judged(tmp_path, write_matrix):
    """Issue 40, done when 1: GlobalMaxPool on [2, 5, 7] → Squeeze, BatchNormalization at opset 12 with
    `momentum`, an opset-12 Squeeze(axes=[0]) → Transpose on [1, 1, 8, 4, 3] and com.microsoft Gelu all
    pass against a correct onnxruntime, the last with onnxruntime's output as its reference, said. And
    issue 41, wrong verdicts 4: Cast(to=STRING) of float32 0.1 is "0.1", not float64's digits."""
    rng = np.random.default_rng(0)
    body = ""
    for name, make, shape in (("gmp", _gmp, (2, 5, 7)), ("bn", _batchnorm, (2, 3, 4, 4)),
                              ("squeeze", _squeeze, (1, 1, 8, 4, 3)), ("gelu", _gelu, (2, 8))):
        body += case(tmp_path, name, make(tmp_path / f"{name}.onnx"),
                     {"x": rng.standard_normal(shape).astype(np.float32)})
    _as_string(tmp_path / "text.onnx")
    body += case(tmp_path, "text", None, {"x": np.array([0.1, 1.5, -2.25], np.float32)})
    done, cells = run(write_matrix, body)
    assert {name: cells[name]["status"] for name in cells} == dict.fromkeys(["gmp", "bn", "squeeze", "gelu", "text"],
                                                                            "pass"), done.stderr
    assert cells["gelu"]["reference"].startswith("onnxruntime 1.32.0 CPU, float32, optimisations off for y: "
                                                 "no float64 evaluation for com.microsoft Gelu (node gelu)")
    assert "case gelu: onnxruntime 1.32.0 CPU" in done.stderr  # said once, at the run's end
    assert "agrees with onnxruntime 1.32.0" in cells["bn"]["reference_check"]
    assert done.returncode == 0


def test_an_if_reading_an_outer_value_in_fp16_is_judged(tmp_path, write_matrix):
    """Issue 40, done when 1 (and point 4): the FP16 copy of an If whose branches read a graph input
    (through the Cast the converter inserts) is in an order onnxruntime loads, so its cells are judged."""
    branch = lambda op, name: h.make_graph([h.make_node(op, ["x", "x"], [name])], name, [],  # noqa: E731
                                           [h.make_tensor_value_info(name, T.FLOAT, [2, 3])])
    _ = model(tmp_path / "branch.onnx", [
        h.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        h.make_node("Greater", ["total", "zero"], ["positive"]),
        h.make_node("If", ["positive"], ["y"], then_branch=branch("Add", "sum"), else_branch=branch("Mul", "product"))],
        [("x", T.FLOAT, [2, 3])], [("y", T.FLOAT, [2, 3])], [nh.from_array(np.array(0.0, np.float32), "zero")])
    done, cells = run(write_matrix, case(tmp_path, "branch", None, {"x": np.full((2, 3), 0.5, np.float32)},
                                         profiles=("fp16",)))
    assert cells["branch"]["status"] in ("pass", "fail"), cells["branch"]["error"]


def test_a_clamp_of_the_fp16_conversion_is_named_not_the_engine(tmp_path, write_matrix):
    """Issue 40, done when 1 (and point 5): y = x / 1e5 in FP16. The copy holds 65504 for 1e5, so it is
    already wrong before any engine runs; the cell's cause names the clamp and both errors."""
    model(tmp_path / "divide.onnx", [h.make_node("Div", ["x", "scale"], ["y"], name="divide")],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], [nh.from_array(np.array(1e5, np.float32), "scale")])
    x = np.array([2e4, 3e4, 4e4, 5e4], np.float32)
    done, cells = run(write_matrix, case(tmp_path, "divide", None, {"x": x}, profiles=("fp16",)))
    cell = cells["divide"]
    conversion = float(np.max(np.abs(x.astype(np.float64) / 65504 - x.astype(np.float64) / 1e5)))
    assert cell["status"] == "fail"
    assert cell["conversion_max_abs"] == pytest.approx(conversion, rel=1e-6)  # the copy alone, in float64
    assert cell["copy_max_abs"] < 1e-3 < conversion  # what the engine added is FP16 rounding
    assert "FP16 copy clamps constant 'scale' (1e+05 → 65504) at node divide: the copy alone is off by" in cell["error"]


def test_a_users_expected_file_off_by_half_is_named_not_the_engine(tmp_path, write_matrix):
    """Issue 40, done when 1 (and issue 41, wrong verdicts 9's cause): a Relu whose expected file is
    0.5 off everywhere; the engine agrees with the model's own evaluation, so the file is the cause."""
    for name in ("relu", "nothing"):
        model(tmp_path / f"{name}.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [2, 4])],
              [("y", T.FLOAT, [2, 4])])
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    # Issue 41, second sweep, finding 28a: a file of a shape the model's data decides (a Reshape to
    # an input's values), checked at no plan: "compare failed: ValueError" read as trtmatrix's crash.
    model(tmp_path / "shaped.onnx", [h.make_node("Reshape", ["x", "shape"], ["y"])],
          [("x", T.FLOAT, [2, 4]), ("shape", T.INT64, [1])], [("y", T.FLOAT, ["n"])])
    done, cells = run(write_matrix, case(tmp_path, "relu", None, {"x": x}, expected={"y": np.maximum(x, 0) + 0.5})
                      + case(tmp_path, "shaped", None, {"x": x, "shape": np.array([8])}, expected={"y": x[0, :1]})
                      + case(tmp_path, "nothing", None, {"x": x}, expected={"y": np.full((2, 4), np.nan)}))
    # third sweep, 17: a file of NaN alone stays an error, as judging.md says, not a FAIL of error 0
    assert cells["nothing"]["status"] == "error" and "nothing to judge against" in cells["nothing"]["error"]
    assert cells["shaped"]["status"] == "fail"
    assert cells["shaped"]["error"].startswith("the expected file is the cause, not the engine: your expected outputs "
                                               "(shaped-expected.npz) cannot be held against the outputs")
    cell = cells["relu"]
    assert cell["status"] == "fail"  # as the user's file asks; its cause names the file, not the engine
    assert cell["error"].startswith("the expected file is the cause, not the engine: your expected outputs "
                                    "(relu-expected.npz) disagree with the model's own evaluation")
    assert "1 cell of case relu fails against your expected file alone" in done.stderr
    config = next(tmp_path.glob("*.toml"))  # issue 40, point 7: explain starts where the fault is, not at the engine
    explained = subprocess.run([TRTMATRIX, "explain", cell["cell_id"], "-c", str(config)], capture_output=True, text=True)
    assert explained.returncode == 2
    assert "fails against its expected file alone; start there, not at the engine: your expected outputs" \
        in explained.stderr


def test_a_case_no_reference_can_be_made_for_says_so_and_does_not_exit_0(tmp_path, write_matrix):
    """Issue 40, point 3: an op neither evaluation knows. One line naming the case, the node and its op,
    and `expected`; its cells `no_reference`; exit 1."""
    model(tmp_path / "custom.onnx", [h.make_node("Frobnicate", ["x"], ["y"], domain="example.ops", name="frob")],
          [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])], domains=["example.ops"])
    # Issue 41's second sweep: a random draw "agreed with onnxruntime at every node" and failed.
    model(tmp_path / "draw.onnx", [h.make_node("RandomUniformLike", ["x"], ["noise"], name="rnd"),
                                   h.make_node("Add", ["x", "noise"], ["y"], name="add")],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])])
    # and a Dropout in training mode (third sweep, 3): its mask is drawn, too
    model(tmp_path / "drop.onnx", [h.make_node("Dropout", ["x", "ratio", "training"], ["y"], name="drop")],
          [("x", T.FLOAT, [64])], [("y", T.FLOAT, [64])],
          [nh.from_array(np.array(0.5, np.float32), "ratio"), nh.from_array(np.array(True), "training")])
    done, cells = run(write_matrix, case(tmp_path, "custom", None, {"x": np.ones(3, np.float32)})
                      + case(tmp_path, "draw", None, {"x": np.ones(4, np.float32)})
                      + case(tmp_path, "drop", None, {"x": np.ones(64, np.float32)}))
    assert [cells[name]["status"] for name in ("custom", "draw", "drop")] == ["no_reference"] * 3
    assert "node drop (Dropout) draws random numbers" in cells["drop"]["error"]
    line = next(line for line in done.stderr.splitlines() if "case custom not judged" in line)
    assert "no reference" in line and "example.ops Frobnicate (node frob)" in line and "`expected`" in line
    line = next(line for line in done.stderr.splitlines() if "case draw not judged" in line)
    assert "node rnd (RandomUniformLike) draws random numbers" in line
    assert done.returncode == 1


def test_the_check_names_the_node_where_the_evaluations_part(tmp_path, monkeypatch):
    """Issue 40, point 1: without the spec's GlobalMaxPool, onnx.reference gives [2, 1] for [2, 5, 7]:
    the check disputes the reference and names the node, its op and what differs."""
    import matrix.reference.float64_graph as float64_graph

    monkeypatch.setattr(float64_graph, "REPLACEMENTS", [r for r in float64_graph.REPLACEMENTS
                                                        if r.__name__ != "GlobalMaxPool"])
    proto = _gmp(tmp_path / "gmp.onnx")
    found = onnx_reference(proto, {"x": np.ones((2, 5, 7), np.float32)}, ["y"])
    assert found.check["verdict"] == "disputed"
    assert found.check["parting"]["op_type"] == "GlobalMaxPool"
    assert "shape [2, 1] against [2, 5, 1]" in found.check["text"]


def test_a_float32_overflow_is_named_where_float32_leaves_its_range(tmp_path):
    """Issue 41's second sweep: x * 2 at x = 3e38 is 6e38 in float64 and +inf in float32 (beyond its
    largest, 3.4e38): the reference was "disputed", the two evaluations said to part. Sweep 6 #3: an
    "agreed" reference of 6e38 then failed every engine (Inf) for the model's own float32 arithmetic;
    it is disputed naming the node where float32 leaves its range, as an underflow is."""
    proto = model(tmp_path / "twice.onnx", [h.make_node("Mul", ["x", "two"], ["y"], name="mul")], [("x", T.FLOAT, [2])],
                  [("y", T.FLOAT, [2])], [nh.from_array(np.float32(2), "two")])
    found = onnx_reference(proto, {"x": np.float32([3e38, -3e38])}, ["y"])
    assert found.check["verdict"] == "disputed", found.check["text"]
    assert found.check["text"].startswith("output 'y' leaves float32's range at node mul (Mul)"), found.check["text"]
    assert "part" not in found.check["text"]  # no evaluation misreads the node


def test_no_reference_is_an_error_of_its_own():
    proto = h.make_model(h.make_graph([h.make_node("Frobnicate", ["x"], ["y"], domain="example.ops")], "g",
                                      [h.make_tensor_value_info("x", T.FLOAT, [1])],
                                      [h.make_tensor_value_info("y", T.FLOAT, [1])]),
                         opset_imports=[h.make_opsetid("", 13), h.make_opsetid("example.ops", 1)])
    with pytest.raises(NoReference, match="example.ops Frobnicate"):
        onnx_reference(proto, {"x": np.ones(1, np.float32)}, ["y"])


def test_topological_order_counts_what_subgraphs_read():
    """Issue 40, point 4: a Cast that an If's branch reads is put before the If."""
    then = h.make_graph([h.make_node("Identity", ["half"], ["out"])], "then", [],
                        [h.make_tensor_value_info("out", T.FLOAT16, [2])])
    graph = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then, name="if"),
                          h.make_node("Cast", ["x"], ["half"], to=T.FLOAT16, name="cast")], "g", [], [])
    assert [node.name for node in topological_order(graph)] == ["cast", "if"]


def test_a_profile_whose_precision_nothing_ran_is_not_its_pass(tmp_path, write_matrix):
    """Issue 40, point 6, and issue 41, wrong verdicts 5: a DOUBLE model under an FP16 profile runs
    unchanged; the cell says its copy holds no FP16 value instead of passing as FP16. An FP32 model's FP16
    cell says which nodes onnxruntime ran in float32 (ReduceSum has no FP16 kernel on its CPU)."""
    model(tmp_path / "double.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.DOUBLE, [4])], [("y", T.DOUBLE, [4])])
    model(tmp_path / "norm.onnx", [h.make_node("Mul", ["x", "x"], ["squares"], name="square"),
                                   h.make_node("ReduceSum", ["squares", "axes"], ["total"], name="total"),
                                   h.make_node("Sqrt", ["total"], ["norm"], name="norm"),
                                   h.make_node("Div", ["x", "norm"], ["y"], name="scale")],
          [("x", T.FLOAT, [2, 8])], [("y", T.FLOAT, [2, 8])], [nh.from_array(np.array([1], np.int64), "axes")])
    body = case(tmp_path, "double", None, {"x": np.linspace(-1, 1, 4)}, profiles=("fp16",))
    body += case(tmp_path, "norm", None, {"x": np.linspace(1, 2, 16, dtype=np.float32).reshape(2, 8)}, profiles=("fp16",))
    # Issue 41's second sweep: a model of no node (its output is its input) was an `error`, the
    # converter's casts making a cycle; a skipped cell showed a measured "skip 0.00e+00".
    model(tmp_path / "through.onnx", [], [("x", T.FLOAT, [4])], [("x", T.FLOAT, [4])])
    body += case(tmp_path, "through", None, {"x": np.linspace(1, 2, 4, dtype=np.float32)}, profiles=("fp16",))
    # Issue 41, sweep 3 #6 and part 1 #8: an output that is an initializer (no node computes it), or
    # one listed twice, made the converter's casts read a value nothing made: an `error` "the FP16
    # variant fails the ONNX checker", as if the model were broken. The copy computes them now.
    model(tmp_path / "initout.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])],
          [("y", T.FLOAT, [3]), ("w", T.FLOAT, [3])], [nh.from_array(np.array([1, 2, 3], np.float32), "w")])
    model(tmp_path / "twice.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])],
          [("y", T.FLOAT, [3]), ("y", T.FLOAT, [3])])
    for name in ("initout", "twice"):
        body += case(tmp_path, name, None, {"x": np.array([-1, 0, 1], np.float32)}, profiles=("fp16",))
    # sweep 3 #20: onnxruntime's CPU has no FP16 EyeLike: the copy was an `error` "cannot load the
    # FP16 variant", not what the engine lacks
    model(tmp_path / "eye.onnx", [h.make_node("EyeLike", ["n"], ["e"], dtype=T.FLOAT),
                                  h.make_node("Add", ["x", "e"], ["y"])], [("x", T.FLOAT, [2, 2]), ("n", T.INT64, [2, 2])],
          [("y", T.FLOAT, [2, 2])])
    body += case(tmp_path, "eye", None, {"x": np.ones((2, 2), np.float32), "n": np.zeros((2, 2), np.int64)},
                 profiles=("fp16",))
    # fourth sweep, 7: a written-out LayerNorm (tf2onnx's form) whose FP16 copy onnxruntime's
    # LayerNormFusion cannot take: "model variant failed", blaming the copy, for every FP16 profile
    rng = np.random.default_rng(0)
    weights = [nh.from_array(np.array(2.0, np.float32), "two"), nh.from_array(np.array(1e-5, np.float32), "eps"),
               nh.from_array(rng.normal(size=8).astype(np.float32), "g"),
               nh.from_array(rng.normal(size=8).astype(np.float32), "b")]
    model(tmp_path / "lnw.onnx", [h.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]), h.make_node("Sub", ["x", "mu"], ["d"]),
                                  h.make_node("Pow", ["d", "two"], ["d2"]), h.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
                                  h.make_node("Add", ["var", "eps"], ["ve"]), h.make_node("Sqrt", ["ve"], ["sd"]),
                                  h.make_node("Div", ["d", "sd"], ["n"]), h.make_node("Mul", ["n", "g"], ["s"]),
                                  h.make_node("Add", ["s", "b"], ["y"])], [("x", T.FLOAT, [4, 8])], [("y", T.FLOAT, [4, 8])],
          weights, opset=17)
    body += case(tmp_path, "lnw", None, {"x": rng.normal(size=(4, 8)).astype(np.float32)}, profiles=("fp16",))
    # fourth sweep, 17: an output declared of another rank than the model computes: its FP16 cells
    # blamed "the FP16 variant"
    model(tmp_path / "rank.onnx", [h.make_node("Unsqueeze", ["x", "axes"], ["y"])], [("x", T.FLOAT, [2, 3])],
          [("y", T.FLOAT, [2, 3])], [nh.from_array(np.array([0], np.int64), "axes")])
    body += case(tmp_path, "rank", None, {"x": np.ones((2, 3), np.float32)}, profiles=("fp16",))
    done, cells = run(write_matrix, body)
    assert "the model itself fails the ONNX checker's full check" in cells["rank"]["error"], cells["rank"]["error"]
    assert cells["eye"]["status"] == "unsupported" and "EyeLike" in cells["eye"]["error"], cells["eye"]["error"]
    assert not str(cells["lnw"]["error"]).startswith("model variant failed"), cells["lnw"]["error"]
    for name in ("double", "through"):
        assert cells[name]["status"] == "skipped"
        assert cells[name]["error"].startswith("the FP16 copy holds no FP16 value"), cells[name]["error"]
    for name in ("initout", "twice"):
        assert (cells[name]["status"], cells[name]["max_abs"]) == ("pass", 0.0), cells[name]["error"]
    assert "skip" in done.stderr and "skip 0" not in done.stderr
    assert "ReduceSum 1" in cells["norm"]["precision_ran"], cells["norm"]["precision_ran"]


def test_a_sequence_output_is_one_line_not_an_empty_stop_iteration():
    """Issue 41, tracebacks: a model with a sequence output failed with an empty "StopIteration"."""
    proto = h.make_model(h.make_graph([h.make_node("SequenceConstruct", ["x", "x"], ["s"])], "g",
                                      [h.make_tensor_value_info("x", T.FLOAT, [2])],
                                      [h.make_tensor_sequence_value_info("s", T.FLOAT, [2])]),
                         opset_imports=[h.make_opsetid("", 13)])
    with pytest.raises(NoReference, match="a sequence output"):
        onnx_reference(proto, {"x": np.ones(2, np.float32)}, ["s"])


def test_a_dimension_declared_minus_one_is_dynamic(tmp_path, write_matrix):
    """Found on a real paddle2onnx export (PaddleOCR's classifier): a dynamic dimension written as
    dim_value -1, which onnxruntime runs, was taken for a fixed size and the case refused (exit 2)."""
    proto = model(tmp_path / "paddle.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [-1, 3])],
                  [("y", T.FLOAT, [-1, 3])])
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1
    done, cells = run(write_matrix, case(tmp_path, "paddle", None, {"x": np.ones((2, 3), np.float32)}))
    assert cells["paddle"]["status"] == "pass", done.stderr


def test_the_summary_says_when_no_node_computed_in_the_profiles_precision(tmp_path, write_matrix):
    """Issue 41, second sweep, finding 28i: the release-notes summary said "✅ passes" for FP16
    cells none of whose nodes computed in FP16 (onnxruntime's CPU ran the copy's Mul in float32)."""
    model(tmp_path / "twice.onnx", [h.make_node("Mul", ["x", "x"], ["y"], name="square")], [("x", T.FLOAT, [4])],
          [("y", T.FLOAT, [4])])
    done, cells = run(write_matrix, case(tmp_path, "twice", None, {"x": np.linspace(1, 2, 4, dtype=np.float32)},
                                         profiles=("fp16",)))
    assert cells["twice"]["status"] == "pass" and "⇡" in done.stderr
    config = next(tmp_path.glob("*.toml"))
    summary = subprocess.run([TRTMATRIX, "summary", "-c", str(config)], capture_output=True, text=True)
    assert summary.returncode == 0, summary.stderr
    assert "✅ passes (1 reduced-precision cell ⇡: no node computed in that precision)" in summary.stdout


def test_a_models_own_cast_to_fp16_rounds_in_its_reference(tmp_path, write_matrix):
    """Issue 41, third sweep, findings 8 and 9: `Cast(Cast(x, FLOAT16), FLOAT)` in a float32 model (what
    an autocast export holds) was dropped from the float64 reference: both engines, exactly right per
    the spec, failed with Inf at 70000 (FP16's inf), and repro blamed FP32; a BF16 one was disputed.
    Fourth sweep, 2: a Cast of int64 to FLOAT was exact in the reference: right engines failed; 3: an
    output float32 rounding decides (a bucketiser) failed exact engines. Issue 41, sweep 6 #2 (steps
    outside a closed list), #3 (float32 overflow), #7 (the model's own Cast DOUBLE → FLOAT) and #12
    (below); sweep 7 N14 (a domain edge float32 rounding decides)
    and N3 (a flipped step an output does not hang on), N13 (or only padding holds), N4 (a top1 that float32 saturation ties),
    N6 (a fail against an expected file of a rounding-decided step names the step)."""
    # and a BF16 one (finding 9): the referee could not fetch its intermediate, "cannot run the model"
    model(tmp_path / "island.onnx", [h.make_node("Cast", ["x"], ["half"], to=T.FLOAT16, name="to16"),
                                     h.make_node("Cast", ["half"], ["y"], to=T.FLOAT, name="back"),
                                     h.make_node("Cast", ["x"], ["brain"], to=T.BFLOAT16, name="tobf16"),
                                     h.make_node("Cast", ["brain"], ["b"], to=T.FLOAT, name="backbf"),
                                     # fourth sweep, 2: ids past 2**24 through FLOAT are what FLOAT holds
                                     h.make_node("Cast", ["ids"], ["fids"], to=T.FLOAT, name="idsf"),
                                     h.make_node("Cast", ["fids"], ["i"], to=T.INT64, name="back64"),
                                     # sweep 6 #7: so is a double feed the model narrows (16777217 is 16777216)
                                     h.make_node("Cast", ["d"], ["df"], to=T.FLOAT, name="narrow"),
                                     h.make_node("Sub", ["df", "c"], ["dm"], name="less")],
          [("x", T.FLOAT, [4]), ("ids", T.INT64, [3]), ("d", T.DOUBLE, [2])],
          [("y", T.FLOAT, [4]), ("b", T.FLOAT, [4]), ("i", T.INT64, [3]), ("dm", T.FLOAT, [2])],
          [nh.from_array(np.float32(2 ** 24), "c")])
    x = np.array([1000.3, 0.1, 3.14159, 70000.0], np.float32)
    ids = np.array([2 ** 24 + 1, 3, -(2 ** 24) - 3], np.int64)
    d = np.array([2 ** 24 + 1, 2 ** 24 + 3], np.float64)
    # sweep 6 #2: steps outside any list, each fed a float32 Add that decides it (exact engines failed,
    # NonZero's and NonMaxSuppression's lengths were an `error` "compare failed"): Shrink and
    # ThresholdedRelu just above their threshold, MaxPool's indices on a tie float32 makes, NonZero of
    # a difference float32 makes 0, NonMaxSuppression at its score_threshold, IsInf of an overflow
    e = 2.0 ** -26
    model(tmp_path / "steps6.onnx", [
        h.make_node("Add", ["a1", "e1"], ["s1"]), h.make_node("Shrink", ["s1"], ["shrink"], lambd=3.0),
        h.make_node("ThresholdedRelu", ["s1"], ["thr"], alpha=3.0),
        h.make_node("Add", ["a2", "e2"], ["s2"]), h.make_node("MaxPool", ["s2"], ["v", "idx"], kernel_shape=[2], strides=[2]),
        h.make_node("Add", ["a3", "e3"], ["s3"]), h.make_node("Sub", ["s3", "a3"], ["d3"]), h.make_node("NonZero", ["d3"], ["nz"]),
        h.make_node("Add", ["a4", "e4"], ["s4"]), h.make_node("NonMaxSuppression", ["boxes", "s4", "most", "iou", "least"], ["nms"]),
        h.make_node("Mul", ["a5", "big"], ["p5"]), h.make_node("Mul", ["p5", "big"], ["q5"]), h.make_node("IsInf", ["q5"], ["inf"])],
        [("a1", T.FLOAT, [2]), ("a2", T.FLOAT, [1, 1, 4]), ("a3", T.FLOAT, [3]), ("a4", T.FLOAT, [1, 1, 2]), ("a5", T.FLOAT, [2])],
        [("shrink", T.FLOAT, [2]), ("thr", T.FLOAT, [2]), ("idx", T.INT64, [1, 1, 2]), ("nz", T.INT64, [1, None]),
         ("nms", T.INT64, [None, 3]), ("inf", T.BOOL, [2])],
        [nh.from_array(np.float32([e, -e]), "e1"), nh.from_array(np.float32([[[0, e, 0, 2 * e]]]), "e2"),
         nh.from_array(np.float32([e, 1, e]), "e3"), nh.from_array(np.float32(e), "e4"),
         nh.from_array(np.float32([[[0, 0, 1, 1], [2, 2, 3, 3]]]), "boxes"), nh.from_array(np.int64([10]), "most"),
         nh.from_array(np.float32([0.5]), "iou"), nh.from_array(np.float32([0.5]), "least"),
         nh.from_array(np.float32(1e30), "big")])
    # sweep 6 #3: float32 leaving its range, where float64 does not (x * 1e30 * 1e30 * 1e-30, a
    # hand-written softmax at logits of 100): every engine failed Inf or NaN, the underflow was disputed
    model(tmp_path / "ranges.onnx", [h.make_node("Mul", ["x", "big"], ["a"]), h.make_node("Mul", ["a", "big"], ["b"]),
                                     h.make_node("Mul", ["b", "small"], ["y"]), h.make_node("Exp", ["logits"], ["e"]),
                                     h.make_node("ReduceSum", ["e"], ["s"], keepdims=1), h.make_node("Div", ["e", "s"], ["soft"])],
          [("x", T.FLOAT, [3]), ("logits", T.FLOAT, [1, 4])], [("y", T.FLOAT, [3]), ("soft", T.FLOAT, [1, 4])],
          [nh.from_array(np.float32(1e30), "big"), nh.from_array(np.float32(1e-30), "small")])
    # fourth sweep, 3: Floor(x / 0.1) at 0.7 is 6 in float64 and 7 in float32: no reference can say
    model(tmp_path / "bucket.onnx", [h.make_node("Div", ["x", "tenth"], ["q"]), h.make_node("Floor", ["q"], ["y"])],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], [nh.from_array(np.array(0.1, np.float32), "tenth")])
    # fourth sweep, 10: a local function (onnxscript's) had no float64 evaluation: onnxruntime's own
    # float32 output became the reference, and its FP16 copy failed the checker
    half = h.make_node("Constant", [], ["h"], value=nh.from_array(np.array(0.5, np.float32)))
    body = h.make_function("custom", "Cube", ["a"], ["b"], [half, h.make_node("Mul", ["a", "a"], ["s"]),
                                                            h.make_node("Mul", ["s", "h"], ["b"])],
                           [h.make_opsetid("", 13)])
    proto = h.make_model(h.make_graph([h.make_node("Cube", ["x"], ["y"], domain="custom")], "g",
                                      [h.make_tensor_value_info("x", T.FLOAT, [4])],
                                      [h.make_tensor_value_info("y", T.FLOAT, [4])]),
                         opset_imports=[h.make_opsetid("", 13), h.make_opsetid("custom", 1)], functions=[body],
                         ir_version=8)
    onnx.save(proto, tmp_path / "fn.onnx")
    # fourth sweep, 21: an INT4 island (numpy has no INT4: no node held) "agreed at every node (0 held)";
    # onnxruntime rounds to INT4 where onnx.reference truncates: the outputs part
    island = h.make_model(h.make_graph([h.make_node("Cast", ["x"], ["q"], to=T.INT4), h.make_node("Cast", ["q"], ["y"], to=T.FLOAT)],
                                       "g", [h.make_tensor_value_info("x", T.FLOAT, [3])],
                                       [h.make_tensor_value_info("y", T.FLOAT, [3])]),
                          opset_imports=[h.make_opsetid("", 21)], ir_version=10)
    onnx.save(island, tmp_path / "int4.onnx")
    model(tmp_path / "tie.onnx", [h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Hardmax", ["s"], ["y"])],
          [("a", T.FLOAT, [1, 2]), ("b", T.FLOAT, [1, 2])], [("y", T.FLOAT, [1, 2])])
    # fifth sweep, 1: what feeds a step decides it (Sign's input, 2**-26 in float64, is a float32 number:
    # float32's own Add and Sub make it 0); fmod wraps at its divisor; Range's and Unique's lengths
    model(tmp_path / "sign.onnx", [h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Sub", ["s", "a"], ["d"]),
                                   h.make_node("Sign", ["d"], ["y"])], [("a", T.FLOAT, [2])], [("y", T.FLOAT, [2])],
          [nh.from_array(np.float32([2 ** -26, 2 ** -26]), "b")])
    model(tmp_path / "fmod.onnx", [h.make_node("Sub", ["a", "b"], ["s"]), h.make_node("Mod", ["s", "one"], ["y"], fmod=1)],
          [("a", T.FLOAT, [2]), ("b", T.FLOAT, [2])], [("y", T.FLOAT, [2])], [nh.from_array(np.float32(1), "one")])
    model(tmp_path / "range.onnx", [h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Range", ["z", "s", "one"], ["y"])],
          [("a", T.FLOAT, [])], [("y", T.FLOAT, [None])], [nh.from_array(np.float32(2 ** -26), "b"),
                                                           nh.from_array(np.float32(0), "z"), nh.from_array(np.float32(1), "one")])
    model(tmp_path / "unique.onnx", [h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Unique", ["s"], ["y"])],
          [("a", T.FLOAT, [3])], [("y", T.FLOAT, [None])], [nh.from_array(np.float32([0, 2 ** -26, 0]), "b")], opset=17)
    # fifth sweep, 15: onnx.reference's GRU reads no sequence_lens; the disputed line now says it is the one wrong
    rng = np.random.default_rng(0)
    model(tmp_path / "gru.onnx", [h.make_node("GRU", ["x", "w", "r", "", "lens"], ["y"], hidden_size=2)],
          [("x", T.FLOAT, [3, 2, 2])], [("y", T.FLOAT, [3, 1, 2, 2])],
          [nh.from_array(rng.standard_normal((1, 6, 2)).astype(np.float32), "w"),
           nh.from_array(rng.standard_normal((1, 6, 2)).astype(np.float32), "r"), nh.from_array(np.int32([1, 3]), "lens")])
    # sixth sweep, 12: where onnx.reference broke the spec the cell was disputed, its cause unsaid: an
    # opset-11 Softmax over axis 1 of [2, 3, 4] is over 12 values, a GRU bounds its gates by clip, an LSTM
    # with input_forget couples f = 1 - i (evaluated by trtmatrix now); onnx.reference's LSTM reads no clip (said)
    model(tmp_path / "softmax11.onnx", [h.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", T.FLOAT, [2, 3, 4])],
          [("y", T.FLOAT, [2, 3, 4])], opset=11)
    for name, op, gates, attribute in (("gru_clip", "GRU", 3, {"clip": 0.3}), ("lstm_forget", "LSTM", 4, {"input_forget": 1}),
                                       ("lstm_clip", "LSTM", 4, {"clip": 0.3})):
        model(tmp_path / f"{name}.onnx", [h.make_node(op, ["x", "w", "r"], ["y"], hidden_size=3, **attribute)],
              [("x", T.FLOAT, [4, 2, 2])], [("y", T.FLOAT, [4, 1, 2, 3])],
              [nh.from_array(4 * rng.standard_normal((1, 3 * gates, 2)).astype(np.float32), "w"),
               nh.from_array(4 * rng.standard_normal((1, 3 * gates, 3)).astype(np.float32), "r")])
    model(tmp_path / "emptymean.onnx", [h.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)],
          [("x", T.FLOAT, [2, 0])], [("y", T.FLOAT, [2])])
    # issue 41, sweep 7 N14: x * 0.1f - 0.3f at 3 is 0 in float32 and -7.45e-9 in float64: Sqrt, Log and
    # Pow(., 0.5) of it are 0 / -inf in float32, NaN in float64; every exact engine failed "NaN expected"
    model(tmp_path / "edge.onnx", [h.make_node("Mul", ["x", "tenth"], ["p"]), h.make_node("Sub", ["p", "t"], ["d"]),
                                   h.make_node("Sqrt", ["d"], ["root"]), h.make_node("Log", ["d"], ["log"]),
                                   h.make_node("Pow", ["d", "half"], ["pow"])],
          [("x", T.FLOAT, [3])], [("root", T.FLOAT, [3]), ("log", T.FLOAT, [3]), ("pow", T.FLOAT, [3])],
          [nh.from_array(np.float32(0.1), "tenth"), nh.from_array(np.float32(0.3), "t"), nh.from_array(np.float32(0.5), "half")])
    # issue 41, sweep 7 N3: 3 * 0.1f >= 0.3f is true in float32, false in float64, but Where(g, x, x), a
    # flag times 0 and a hinge at its joint do not hang on it: they were disputed for ever
    model(tmp_path / "joint.onnx", [h.make_node("Mul", ["x", "tenth"], ["p"]), h.make_node("GreaterOrEqual", ["p", "t"], ["g"]),
                                    h.make_node("Where", ["g", "x", "x"], ["same"]), h.make_node("Sub", ["p", "t"], ["d"]),
                                    h.make_node("Where", ["g", "d", "zero"], ["hinge"]),
                                    h.make_node("Cast", ["g"], ["flag"], to=T.FLOAT), h.make_node("Mul", ["flag", "zero"], ["off"]),
                                    h.make_node("Add", ["x", "off"], ["times0"])],
          [("x", T.FLOAT, [3])], [("same", T.FLOAT, [3]), ("hinge", T.FLOAT, [3]), ("times0", T.FLOAT, [3])],
          [nh.from_array(np.float32(0.1), "tenth"), nh.from_array(np.float32(0.3), "t"), nh.from_array(np.float32(0), "zero")])
    # N6: the same step with an expected file of its float64 side ([0, 0, 5], as numpy gives): failed with no cause
    model(tmp_path / "stepfile.onnx", [h.make_node("Mul", ["x", "tenth"], ["p"]), h.make_node("GreaterOrEqual", ["p", "t"], ["g"]),
                                       h.make_node("Where", ["g", "x", "zero"], ["y"])], [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])],
          [nh.from_array(np.float32(0.1), "tenth"), nh.from_array(np.float32(0.3), "t"), nh.from_array(np.float32(0), "zero")])
    # N4: sigmoid(20) and sigmoid(25) are both 1.0f: a `top1` rule failed every float32 engine
    model(tmp_path / "saturated.onnx", [h.make_node("Sigmoid", ["x"], ["y"])], [("x", T.FLOAT, [2, 3])], [("y", T.FLOAT, [2, 3])])
    # N13: the one element float32 rounding decides (3 * 0.1f >= 0.3f) is padding the case's mask leaves out
    model(tmp_path / "padded.onnx", [h.make_node("Mul", ["x", "tenth"], ["p"]), h.make_node("GreaterOrEqual", ["p", "t"], ["g"]),
                                     h.make_node("Where", ["g", "x", "zero"], ["w"]), h.make_node("Cast", ["m"], ["mf"], to=T.FLOAT),
                                     h.make_node("Mul", ["mf", "zero"], ["off"]), h.make_node("Add", ["w", "off"], ["y"])],
          [("x", T.FLOAT, [1, 3]), ("m", T.INT64, [1, 3])], [("y", T.FLOAT, [1, 3])],
          [nh.from_array(np.float32(0.1), "tenth"), nh.from_array(np.float32(0.3), "t"), nh.from_array(np.float32(0), "zero")])
    done, cells = run(write_matrix, case(tmp_path, "island", None, {"x": x, "ids": ids, "d": d})
                      + case(tmp_path, "steps6", None, {"a1": np.float32([3, -3]), "a2": np.ones((1, 1, 4), np.float32),
                                                         "a3": np.float32([1, 2, 4]), "a4": np.float32([[[0.5, 0.9]]]),
                                                         "a5": np.float32([1, 1e-30])})
                      + case(tmp_path, "ranges", None, {"x": np.float32([1, 2, 3]),
                                                        "logits": np.float32([[100, 99, 98, 0]])})
                      + case(tmp_path, "bucket", None, {"x": np.array([0.3, 0.7, 1.1, 2.5], np.float32)})
                      + case(tmp_path, "fn", None, {"x": np.array([1.1, -2.3, 3.7, 0.3], np.float32)},
                             profiles=("fp16",))
                      + case(tmp_path, "int4", None, {"x": np.array([0.3, 1.7, -2.9], np.float32)})
                      + case(tmp_path, "emptymean", None, {"x": np.zeros((2, 0), np.float32)})
                      + case(tmp_path, "edge", None, {"x": np.float32([3, 4, 5])})
                      + case(tmp_path, "joint", None, {"x": np.float32([3, 1, 5])})
                      + case(tmp_path, "padded", None, {"x": np.float32([[3, 1, 5]]), "m": np.int64([[0, 1, 1]])})
                      + 'mask = "m"\n'
                      + case(tmp_path, "stepfile", None, {"x": np.float32([3, 1, 5])}, expected={"y": np.float32([0, 0, 5])})
                      + case(tmp_path, "saturated", None, {"x": np.float32([[20, 25, 0], [1, 3, 2]])})
                      + "[cases.saturated.accept.fp32]\ntop1 = 1.0\n"
                      + case(tmp_path, "tie", None, {"a": np.float32([[1, 1]]), "b": np.float32([[0, 2 ** -26]])})
                      + case(tmp_path, "sign", None, {"a": np.float32([3, 1])})
                      + case(tmp_path, "fmod", None, {"a": np.float32([3, 5]), "b": np.float32([2 ** -26, 2 ** -26])})
                      + case(tmp_path, "range", None, {"a": np.float32(3)})
                      + case(tmp_path, "unique", None, {"a": np.float32([1, 1, 2])})
                      + case(tmp_path, "gru", None, {"x": np.ones((3, 2, 2), np.float32)})
                      + case(tmp_path, "softmax11", None, {"x": 3 * rng.standard_normal((2, 3, 4)).astype(np.float32)})
                      + "".join(case(tmp_path, name, None, {"x": rng.standard_normal((4, 2, 2)).astype(np.float32)})
                                for name in ("gru_clip", "lstm_forget", "lstm_clip")))
    for name in ("softmax11", "gru_clip", "lstm_forget"):
        assert cells[name]["status"] == "pass", cells[name]
    assert cells["lstm_clip"]["status"] == "disputed" and "onnx.reference's LSTM ignores `clip`: it is the " \
        "float64 evaluation that misreads this node" in cells["lstm_clip"]["error"], cells["lstm_clip"]["error"]
    assert cells["gru"]["status"] == "disputed" and "onnx.reference's GRU ignores `sequence_lens` (sequences of " \
        "[1, 3] steps, the input has 3): it is the float64 evaluation that misreads this node" in cells["gru"]["error"]
    # exact engines failed for ever (sign, fmod), or were an `error` "output 'y' has shape (3,), reference has (4,)"
    for name, step in (("sign", "Sign#2 (Sign)"), ("fmod", "Mod#1 (Mod)"), ("range", "Range#1 (Range)"),
                       ("unique", "Unique#1 (Unique)")):
        assert cells[name]["status"] == "disputed", cells[name]
        assert f"output 'y' is decided by rounding at node {step}" in cells[name]["error"], cells[name]["error"]
    # fifth sweep, 1: a tie float32 rounding makes (1 + 2**-26 is 1 in float32) decides Hardmax
    assert cells["tie"]["status"] == "disputed" and "(Hardmax)" in cells["tie"]["error"], cells["tie"]
    # fourth sweep, 22: a mean over nothing (NaN in float64, 0 in onnxruntime: the spec leaves it
    # undefined) printed numpy's "RuntimeWarning: Mean of empty slice" on the terminal
    assert cells["emptymean"]["status"] == "disputed" and "RuntimeWarning" not in done.stderr, done.stderr
    assert cells["int4"]["status"] == "disputed" and "output 'y': onnx.reference in float64 and onnxruntime" in \
        cells["int4"]["error"], cells["int4"]
    assert cells["fn"]["reference"].startswith("onnx.reference, every floating type made float64"), cells["fn"]
    assert cells["fn"]["status"] == "pass", cells["fn"]["error"]
    assert cells["bucket"]["status"] == "disputed", cells["bucket"]
    assert "output 'y' is decided by rounding at node Floor#1 (Floor)" in cells["bucket"]["error"]
    assert cells["island"]["status"] == "pass" and cells["island"]["max_abs"] == 0.0, cells["island"]
    assert cells["steps6"]["status"] == "disputed", cells["steps6"]
    assert "output 'shrink' is decided by rounding at node Shrink#1 (Shrink) (and 'thr' at node ThresholdedRelu#2 " \
           "(ThresholdedRelu), 'idx' at node MaxPool#4 (MaxPool), 'nz' at node NonZero#7 (NonZero), 'nms' at node " \
           "NonMaxSuppression#9 (NonMaxSuppression), 'inf' at node IsInf#12 (IsInf))" in cells["steps6"]["error"]
    assert cells["ranges"]["status"] == "disputed", cells["ranges"]
    assert "output 'y' leaves float32's range at node Mul#1 (Mul) (and 'soft' at node Exp#3 (Exp)): float32 holds " \
           "±inf there" in cells["ranges"]["error"], cells["ranges"]["error"]
    assert "agrees with onnxruntime" in cells["island"]["reference_check"]
    assert cells["edge"]["status"] == "disputed", cells["edge"]
    assert "output 'root' leaves its domain in float64 at node Sqrt#2 (Sqrt) (and 'log' at node Log#3 (Log), 'pow' " \
           "at node Pow#4 (Pow)): float64 holds NaN or ±inf there" in cells["edge"]["error"], cells["edge"]["error"]
    assert cells["joint"]["status"] == "pass" and cells["padded"]["status"] == "pass", (cells["joint"], cells["padded"])
    assert cells["saturated"]["status"] == "pass" and cells["saturated"]["top1"] == 1.0, cells["saturated"]
    assert cells["stepfile"]["status"] == "fail", cells["stepfile"]
    assert str(cells["stepfile"]["error"]).startswith("in the model's own evaluation output 'y' is decided by rounding "
                                                      "at node GreaterOrEqual#1 (GreaterOrEqual)"), cells["stepfile"]["error"]
    for command in ("repro", "explain"):  # both advised "loosen the tolerance" / blamed Where, a right kernel
        said = subprocess.run([TRTMATRIX, command, f"stepfile/fp32/{ENV}", "-c", str(tmp_path / "matrix.toml")],
                              capture_output=True, text=True)
        assert said.returncode == 2 and "fails against its expected file at a step float32 rounding decides" in \
            said.stderr, (command, said.stdout, said.stderr)


def test_constants_given_as_value_floats_have_a_float64_reference_and_an_fp16_copy(tmp_path, write_matrix):
    """Issue 41, third sweep, finding 23: Constants written as `value_float`/`value_floats` (a common
    exporter form) left the reference onnxruntime's float32 ("no float64 evaluation for Mul"), and the
    FP16 copy failed the checker (`error`)."""
    model(tmp_path / "consts.onnx", [h.make_node("Constant", [], ["k"], value_float=3.0, name="k"),
                                     h.make_node("Constant", [], ["v"], value_floats=[1.0, 2.0, 3.0, 4.0], name="v"),
                                     h.make_node("Mul", ["x", "k"], ["m"], name="mul"),
                                     h.make_node("Add", ["m", "v"], ["y"], name="add")],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])])
    config = write_matrix(PROFILES + case(tmp_path, "consts", None, {"x": np.float32([1, 2, 3, 4])},
                                          profiles=("fp32", "fp16")), environments=(ENV,))
    done = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = read_run(list_runs(tmp_path / "reports")[-1]).set_index("profile")
    assert list(rows["status"]) == ["pass", "pass"], rows["error"].tolist()
    assert rows.loc["fp32", "reference"] == "onnx.reference, every floating type made float64"


def test_the_referees_own_release_is_not_judged_against_itself(tmp_path, write_matrix):
    """Issue 41, sweep 10 C9's class: an output with no float64 evaluation takes onnxruntime 1.32's
    own output as its reference, so an ort-1.32 cell could only pass (MeanVarianceNormalization's NaN
    did). That cell has no reference, and says why; ort-1.20's is judged against 1.32's output."""
    _gelu(tmp_path / "gelu.onnx")
    body = case(tmp_path, "gelu", None, {"x": np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)})
    config = write_matrix(PROFILES + body, environments=(ENV, "ort-1.32"))
    done = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})
    cells = read_run(list_runs(tmp_path / "reports")[-1]).set_index("env")
    assert cells.loc[ENV, "status"] == "pass", cells.loc[ENV, "error"]
    assert cells.loc["ort-1.32", "status"] == "no_reference"
    assert cells.loc["ort-1.32", "error"] == (
        "the reference for 'y' is this very release's output (onnxruntime 1.32.0 CPU, float32, optimisations off "
        "for y: no float64 evaluation for com.microsoft Gelu (node gelu)): the cell would be judged against itself; "
        "give the case `expected` outputs")
    assert done.returncode == 1 and "judged against itself" in done.stderr, done.stderr  # one line says why


def test_ops_onnx_reference_misreads_are_judged_not_disputed(tmp_path, write_matrix):
    """Issue 41, sweep 10 C4: LpNormalization with p=1 (onnx's divides by the plain sum), LRN (off by
    orders of magnitude in onnx's) and GridSample cubic with border padding at points outside the image
    (onnx's reads the spec otherwise than PyTorch and onnxruntime) were `disputed` "give the case
    `expected` outputs"; onnxruntime agrees with their float64 evaluation at every node. Sweep 12 E4:
    a lone small Sigmoid (a VAD's probability on quiet audio) was disputed by onnxruntime's kernel
    error, 2e-8 absolute but 1e-5 of the value itself."""
    rng = np.random.default_rng(2)
    model(tmp_path / "lp1.onnx", [h.make_node("LpNormalization", ["x"], ["y"], axis=1, p=1)],
          [("x", T.FLOAT, [2, 5])], [("y", T.FLOAT, [2, 5])])
    model(tmp_path / "lrn.onnx", [h.make_node("LRN", ["x"], ["y"], size=3, alpha=0.5, beta=0.75, bias=1.0)],
          [("x", T.FLOAT, [1, 5, 2, 2])], [("y", T.FLOAT, [1, 5, 2, 2])])
    model(tmp_path / "grid.onnx", [h.make_node("GridSample", ["x", "g"], ["y"], mode="cubic", padding_mode="border")],
          [("x", T.FLOAT, [1, 2, 5, 6]), ("g", T.FLOAT, [1, 4, 3, 2])], [("y", T.FLOAT, [1, 2, 4, 3])], opset=20)
    model(tmp_path / "sig.onnx", [h.make_node("Sigmoid", ["x"], ["y"])], [("x", T.FLOAT, [1, 2])], [("y", T.FLOAT, [1, 2])])
    body = case(tmp_path, "lp1", None, {"x": rng.standard_normal((2, 5)).astype(np.float32)}) + \
        case(tmp_path, "lrn", None, {"x": 10 * rng.standard_normal((1, 5, 2, 2)).astype(np.float32)}) + \
        case(tmp_path, "grid", None, {"x": rng.standard_normal((1, 2, 5, 6)).astype(np.float32),
                                      "g": rng.uniform(-1.4, 1.4, (1, 4, 3, 2)).astype(np.float32)}) + \
        case(tmp_path, "sig", None, {"x": np.array([[-6.8748145, -15]], np.float32)})
    done, cells = run(write_matrix, body)
    for name in ("lp1", "lrn", "grid", "sig"):
        assert cells[name]["status"] == "pass", (name, cells[name]["error"])
        assert cells[name]["reference"] == "onnx.reference, every floating type made float64"
        assert cells[name]["reference_check"].startswith("agrees with onnxruntime 1.32.0"), cells[name]["reference_check"]
    assert done.returncode == 0, done.stderr


def test_only_a_constant_fp16_would_round_to_inf_is_said_clamped(tmp_path):
    """Issue 41, sweep 10 C8: c = [65520, 65519, 70000] was "clamps constant 'c' (… and 2 more values)":
    65519 → 65504 is FP16's plain rounding; 65520 and 70000 round to inf, and only the clamp keeps them."""
    from matrix.prepare.fp16_variant import write_fp16_variant
    from matrix.reference.conversion import changed_constants

    original = model(tmp_path / "c.onnx", [h.make_node("Add", ["x", "c"], ["y"])], [("x", T.FLOAT, [3])],
                     [("y", T.FLOAT, [3])], [nh.from_array(np.float32([65520, 65519, 70000]), "c")])
    write_fp16_variant(original, [], tmp_path / "c16.onnx", tmp_path / "c.onnx")
    [change] = changed_constants(original, onnx.load(tmp_path / "c16.onnx"))
    assert (change["what"], change["count"], change["before"], change["after"]) == ("clamps", 2, 70000.0, 65504.0)


def test_a_window_op_of_float_output_is_evaluated_in_float64(tmp_path, write_matrix):
    """Issue 41, sweep 11 D1: HannWindow(output_datatype=FLOAT) → Mul was "no float64 evaluation for Mul"
    (the window stayed float32 beside the float64 input), and its reference onnxruntime's own output."""
    model(tmp_path / "hann.onnx", [h.make_node("HannWindow", ["n"], ["w"], periodic=0, output_datatype=T.FLOAT),
                                   h.make_node("Mul", ["x", "w"], ["y"])],
          [("x", T.FLOAT, [8])], [("y", T.FLOAT, [8])], [nh.from_array(np.array(8, np.int64), "n")], opset=17)
    done, cells = run(write_matrix, case(tmp_path, "hann", None, {"x": np.linspace(1, 2, 8, dtype=np.float32)}))
    cell = cells["hann"]
    assert cell["status"] == "pass" and cell["reference"] == "onnx.reference, every floating type made float64", cell


def test_a_model_the_referee_crashes_on_ends_its_cells_not_the_run(tmp_path, write_matrix):
    """Issue 41, sweep 11 D4: onnxruntime dies of SIGFPE on an int32 Div of INT32_MIN by -1; the referee
    ran it inside trtmatrix's own process, and `run` died with exit 136, no line, every other case lost.
    The referee runs in a process of its own: the run goes on, the case's check says why."""
    model(tmp_path / "div_min.onnx", [h.make_node("Div", ["x", "d"], ["y"])], [("x", T.INT32, [3])], [("y", T.INT32, [3])],
          [nh.from_array(np.array([-1, -2, 2], np.int32), "d")], opset=17)
    model(tmp_path / "relu.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])])
    body = case(tmp_path, "div_min", None, {"x": np.array([-2 ** 31, 7, -7], np.int32)}) + \
        case(tmp_path, "relu", None, {"x": np.array([-1, 0, 2], np.float32)})
    done, cells = run(write_matrix, body)
    assert cells["relu"]["status"] == "pass", done.stderr
    assert cells["div_min"]["status"] == "crash" and "SIGFPE" in cells["div_min"]["error"], cells["div_min"]
    assert "onnxruntime crashed (killed by SIGFPE) evaluating the model" in cells["div_min"]["reference_check"], \
        cells["div_min"]["reference_check"]


def test_sequences_and_branch_constants_are_evaluated_in_float64(tmp_path, write_matrix):
    """Issue 41, sweep 11 D5 and D6: SplitToSequence → ConcatFromSequence, and a `Constant value_float`
    inside an If branch, had "no float64 evaluation" and took onnxruntime's float32 output as the
    reference: the float32 cancellation of the CumSum after them, which every release makes, passed
    at 0.00e+00. Both are float64 now, and fail by what float32's running sum loses."""
    x = np.array([[1e8, 1, -1e8], [1, 2, 3], [0.5, 0.25, 1e-3], [4, 5, 6]], np.float32)
    axis = nh.from_array(np.array(1, np.int64), "axis")
    model(tmp_path / "seq.onnx", [h.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=1),
                                  h.make_node("ConcatFromSequence", ["s"], ["c"], axis=1),
                                  h.make_node("CumSum", ["c", "axis"], ["y"])],
          [("x", T.FLOAT, [4, 3])], [("y", T.FLOAT, [1, 12])], [axis])
    branch = h.make_graph([h.make_node("Constant", [], ["one"], value_float=1.0), h.make_node("Mul", ["flat", "one"], ["b"])],
                          "branch", [], [h.make_tensor_value_info("b", T.FLOAT, [1, 12])])
    model(tmp_path / "branch.onnx", [h.make_node("Reshape", ["x", "shape"], ["flat"]),
                                     h.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                                     h.make_node("Greater", ["total", "low"], ["yes"]),
                                     h.make_node("If", ["yes"], ["m"], then_branch=branch, else_branch=branch),
                                     h.make_node("CumSum", ["m", "axis"], ["y"])],
          [("x", T.FLOAT, [4, 3])], [("y", T.FLOAT, [1, 12])],
          [axis, nh.from_array(np.array([1, 12], np.int64), "shape"), nh.from_array(np.array(-1e30, np.float32), "low")])
    done, cells = run(write_matrix, case(tmp_path, "seq", None, {"x": x}) + case(tmp_path, "branch", None, {"x": x}))
    lost = float(np.max(np.abs(np.cumsum(x.ravel()).astype(np.float64) - np.cumsum(x.ravel().astype(np.float64)))))
    for name in ("seq", "branch"):
        assert cells[name]["reference"] == "onnx.reference, every floating type made float64", cells[name]["reference"]
        assert cells[name]["status"] == "fail" and cells[name]["max_abs"] == pytest.approx(lost), cells[name]


def test_a_non_max_suppression_of_many_boxes_keeps_the_rows_deadline(tmp_path, write_matrix):
    """Issue 41, sweep 11 D7: NonMaxSuppression's float64 evaluation is quadratic Python (40,000 boxes:
    minutes), and only a Loop or Scan had the row's timeout_s: a detection head sat in `prepare` for
    as long as it took. Now it is stopped at timeout_s (10,000 boxes: half a minute), no_reference, and said."""
    count = 10000
    model(tmp_path / "nms.onnx", [h.make_node("NonMaxSuppression", ["boxes", "scores", "most", "iou"], ["picked"]),
                                  h.make_node("Cast", ["picked"], ["y"], to=T.FLOAT)],
          [("boxes", T.FLOAT, [1, count, 4]), ("scores", T.FLOAT, [1, 1, count])], [("y", T.FLOAT, ["picked", 3])],
          [nh.from_array(np.array([count], np.int64), "most"), nh.from_array(np.array([0.99], np.float32), "iou")])
    corner = np.random.default_rng(3).random((1, count, 2)).astype(np.float32)
    body = case(tmp_path, "nms", None, {"boxes": np.concatenate([corner, corner + 0.01], axis=2),
                                        "scores": np.random.default_rng(4).random((1, 1, count)).astype(np.float32)})
    config = write_matrix(PROFILES + body, environments=(ENV,), timeout_s=5)
    done = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True, timeout=120)
    cell = read_run(list_runs(tmp_path / "reports")[-1]).iloc[0]
    assert cell["status"] == "no_reference" and cell["error"].startswith(
        "not evaluated in float64 within timeout_s = 5 s (for each row): the model's float64 evaluation (a "
        "NonMaxSuppression) was stopped"), (cell["error"], done.stderr)


def test_a_round_trip_through_fp16_in_a_branch_rounds_in_the_reference(tmp_path, write_matrix):
    """Issue 41, sweep 11 D10: Cast(FLOAT16) → Cast(FLOAT) inside an If branch was no step in the float64
    evaluation (2049 stayed 2049): every onnxruntime, rightly giving 2048, failed by 1. And a random op in
    a branch was judged, draw against draw, where in the main graph it has no reference."""
    def branch(name, nodes):
        return h.make_graph(nodes, name, [], [h.make_tensor_value_info(f"{name}_y", T.FLOAT, [4])])

    rounds = [h.make_node("Cast", ["x"], ["half"], to=T.FLOAT16), h.make_node("Cast", ["half"], ["then_y"], to=T.FLOAT)]
    model(tmp_path / "round.onnx", [h.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                                    h.make_node("Greater", ["total", "low"], ["yes"]),
                                    h.make_node("If", ["yes"], ["y"], then_branch=branch("then", rounds),
                                                else_branch=branch("else", [h.make_node("Identity", ["x"], ["else_y"])]))],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], [nh.from_array(np.array(-1e30, np.float32), "low")])
    drawn = [h.make_node("RandomUniformLike", ["x"], ["then_y"])]
    model(tmp_path / "drawn.onnx", [h.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                                    h.make_node("Greater", ["total", "low"], ["yes"]),
                                    h.make_node("If", ["yes"], ["y"], then_branch=branch("then", drawn),
                                                else_branch=branch("else", [h.make_node("Identity", ["x"], ["else_y"])]))],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], [nh.from_array(np.array(-1e30, np.float32), "low")])
    x = np.array([0.1, 1.0001, 2049, 3], np.float32)
    done, cells = run(write_matrix, case(tmp_path, "round", None, {"x": x}) + case(tmp_path, "drawn", None, {"x": x}))
    assert cells["round"]["status"] == "pass" and cells["round"]["max_abs"] == 0.0, cells["round"]  # FP16's own values
    assert cells["drawn"]["status"] == "no_reference" and "in a branch or body) draws random numbers" in \
        cells["drawn"]["error"], cells["drawn"]["error"]


def test_a_float8_output_onnxruntime_1_20_cannot_return_is_unsupported(tmp_path, write_matrix):
    """Issue 41, sweep 11 D8: a float8 graph output on onnxruntime 1.20 was `error` "RuntimeError: No
    corresponding Numpy type for Tensor Type." (its words name no type); like bfloat16's, `unsupported`."""
    graph = h.make_graph([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT8E4M3FN)], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [3])], [h.make_tensor_value_info("y", T.FLOAT8E4M3FN, [3])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 21)], ir_version=10), tmp_path / "f8.onnx")
    done, cells = run(write_matrix, case(tmp_path, "f8", None, {"x": np.array([0.3, 500, 1.1], np.float32)},
                                         expected={"y": np.array([42, 126, 57], np.uint8)}))
    assert cells["f8"]["status"] == "unsupported", cells["f8"]["error"]
    assert "an output of a type numpy lacks, so onnxruntime's Python API cannot return it" in cells["f8"]["error"]


def test_an_integer_cast_to_float_in_a_branch_rounds_in_the_reference(tmp_path, write_matrix):
    """Issue 41, sweep 12 E1: Cast(int64 → FLOAT) in an If branch was not rounded to float32 in the
    float64 evaluation (16777217 stayed 16777217), where the main graph's is: every onnxruntime, rightly
    giving 16777216, failed by 1 after a Sub of 2^24."""
    branch = lambda name: h.make_graph([h.make_node("Cast", ["i"], [f"{name}_f"], to=T.FLOAT)], name, [],  # noqa: E731
                                       [h.make_tensor_value_info(f"{name}_f", T.FLOAT, [3])])
    model(tmp_path / "ints.onnx", [h.make_node("ReduceSum", ["i"], ["total"], keepdims=0),
                                   h.make_node("Greater", ["total", "low"], ["yes"]),
                                   h.make_node("If", ["yes"], ["f"], then_branch=branch("then"), else_branch=branch("else")),
                                   h.make_node("Sub", ["f", "big"], ["y"])],
          [("i", T.INT64, [3])], [("y", T.FLOAT, [3])],
          [nh.from_array(np.array(-5, np.int64), "low"), nh.from_array(np.array(2.0 ** 24, np.float32), "big")])
    i = np.array([16777217, 16777219, 3], np.int64)
    done, cells = run(write_matrix, case(tmp_path, "ints", None, {"i": i}))
    assert cells["ints"]["status"] == "pass" and cells["ints"]["max_abs"] == 0.0, cells["ints"]  # float32(i) - 2^24


def test_a_for_loop_without_cond_and_an_optional_are_evaluated_or_said(tmp_path, write_matrix):
    """Issue 41, sweep 12 E12: a Loop of the spec's "for i in range(M)" form (`cond` left out) ran no
    iteration in onnx.reference, the model had "no float64 evaluation for Loop", and onnxruntime's own
    float32 stood in: (1e8 + 1) - 1e8 passed at 0. E11: Optional → OptionalGetElement failed the
    preparation itself (`error` on every engine), where the referee's output stands in as for any op.
    E6: a ConstantOfShape without `value` (the spec's float32 zeros) left the Sub after it without a
    float64 evaluation, and onnxruntime's float32 stood in for the CumSum's cancellation after it."""
    body = h.make_graph([h.make_node("Add", ["acc_in", "x"], ["acc_out"]), h.make_node("Identity", ["cond_in"], ["cond_out"])],
                        "body", [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                                 h.make_tensor_value_info("acc_in", T.FLOAT, [2])],
                        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("acc_out", T.FLOAT, [2])])
    model(tmp_path / "forloop.onnx", [h.make_node("Loop", ["n", "", "start"], ["acc"], body=body),
                                      h.make_node("Sub", ["acc", "x"], ["y"])],
          [("x", T.FLOAT, [2])], [("y", T.FLOAT, [2])],
          [nh.from_array(np.array(1, np.int64), "n"), nh.from_array(np.array([1, 0.5], np.float32), "start")], opset=17)
    model(tmp_path / "optional.onnx", [h.make_node("Optional", ["x"], ["o"]), h.make_node("OptionalGetElement", ["o"], ["e"]),
                                       h.make_node("Neg", ["e"], ["y"])], [("x", T.FLOAT, [2])], [("y", T.FLOAT, [2])], opset=18)
    model(tmp_path / "zeros.onnx", [h.make_node("Shape", ["x"], ["s"]), h.make_node("ConstantOfShape", ["s"], ["z"]),
                                    h.make_node("Sub", ["x", "z"], ["d"]), h.make_node("CumSum", ["d", "axis"], ["y"])],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], [nh.from_array(np.array(0, np.int64), "axis")], opset=17)
    x = np.array([1e8, 1e8], np.float32)
    done, cells = run(write_matrix, case(tmp_path, "forloop", None, {"x": x}) + case(tmp_path, "optional", None, {"x": x})
                      + case(tmp_path, "zeros", None, {"x": np.array([1e8, 1, -1e8, 1], np.float32)}))
    assert cells["zeros"]["reference"] == "onnx.reference, every floating type made float64", cells["zeros"]
    assert cells["zeros"]["status"] == "fail" and cells["zeros"]["max_abs"] == 1.0, cells["zeros"]
    assert cells["forloop"]["reference"] == "onnx.reference, every floating type made float64", cells["forloop"]["reference"]
    assert cells["forloop"]["status"] == "fail" and cells["forloop"]["max_abs"] == 1.0, cells["forloop"]  # float32 loses the 1
    assert cells["optional"]["status"] == "pass", cells["optional"]["error"]


def test_castlike_optionals_scalar_or_empty_loops_and_group_norms_are_judged_against_float64(tmp_path, write_matrix):
    """Issue 41, sweep 13: F1, CastLike(int64, like a float32) and a DOUBLE Constant cast to FLOAT did
    not round in the reference, and right engines failed by 1 and 64; F2, Optional →
    OptionalGetElement → CumSum had no float64 evaluation and ort-1.20 passed against onnxruntime's
    float32; F3, a Loop's scalar scan output was [N, 1] in onnx.reference (disputed against [N]); F4,
    a Loop of no iteration had no float64 evaluation; F5, GroupNormalization (opset 21) ran its
    float32 function body, E[x²] − E[x]², and onnxruntime passed at 0 while 0.2 off float64. F6, a
    float32 Cast to FLOAT in a branch was rounded, so (x + 1e8) - 1e8 around it passed at 0. And a
    round trip through FP16 by CastLike was disputed: 65519 is FP16's 65504, not its inf."""
    f32 = lambda value, name: nh.from_array(np.array(value, np.float32), name)  # noqa: E731
    model(tmp_path / "castlike.onnx", [h.make_node("CastLike", ["i", "like"], ["f"]), h.make_node("Sub", ["f", "big"], ["y"])],
          [("i", T.INT64, [3])], [("y", T.FLOAT, [3])], [f32(0, "like"), f32(2 ** 24, "big")], opset=17)
    double = nh.from_array(np.array([1 + 2 ** -30, 1 + 3 * 2 ** -24, 2.0]), "c")
    model(tmp_path / "double.onnx", [h.make_node("Constant", [], ["cd"], value=double), h.make_node("Cast", ["cd"], ["cf"], to=T.FLOAT),
                                     h.make_node("Sub", ["cf", "one"], ["d"]), h.make_node("Mul", ["d", "s"], ["e"]),
                                     h.make_node("Add", ["e", "x"], ["y"])],
          [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])], [f32(1, "one"), f32(2 ** 30, "s")], opset=17)
    model(tmp_path / "optional.onnx", [h.make_node("Optional", ["x"], ["o"]), h.make_node("OptionalGetElement", ["o"], ["e"]),
                                       h.make_node("CumSum", ["e", "axis"], ["y"])], [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])],
          [nh.from_array(np.array(0, np.int64), "axis")], opset=18)
    sums = h.make_graph([h.make_node("ReduceSum", ["x"], ["r"], keepdims=0), h.make_node("Add", ["s_in", "r"], ["s_out"]),
                         h.make_node("Identity", ["s_out"], ["scan"]), h.make_node("Identity", ["c_in"], ["c_out"])], "body",
                        [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                         h.make_tensor_value_info("s_in", T.FLOAT, [])],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("s_out", T.FLOAT, []),
                         h.make_tensor_value_info("scan", T.FLOAT, [])])
    model(tmp_path / "scalars.onnx", [h.make_node("Loop", ["n", "yes", "s0"], ["s", "y"], body=sums)], [("x", T.FLOAT, [2])],
          [("y", T.FLOAT, [3])], [nh.from_array(np.array(3, np.int64), "n"), nh.from_array(np.array(True), "yes"), f32(0, "s0")],
          opset=17)
    adds = h.make_graph([h.make_node("Add", ["a_in", "x"], ["a_out"]), h.make_node("Identity", ["a_out"], ["scan"]),
                         h.make_node("Identity", ["c_in"], ["c_out"])], "body",
                        [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                         h.make_tensor_value_info("a_in", T.FLOAT, [2])],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("a_out", T.FLOAT, [2]),
                         h.make_tensor_value_info("scan", T.FLOAT, [2])])
    model(tmp_path / "no_trip.onnx", [h.make_node("Loop", ["n", "", "a0"], ["a", "scanned"], body=adds),
                                      h.make_node("Add", ["a", "x"], ["ax"]), h.make_node("Sub", ["ax", "x"], ["y"])],
          [("x", T.FLOAT, [2])], [("y", T.FLOAT, [2])], [nh.from_array(np.array(0, np.int64), "n"), f32([1, 0.5], "a0")], opset=17)
    model(tmp_path / "groups.onnx", [h.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=2)],
          [("x", T.FLOAT, [1, 4, 8])], [("y", T.FLOAT, [1, 4, 8])], [f32(np.ones(4), "scale"), f32(np.zeros(4), "bias")], opset=21)
    branch = lambda name: h.make_graph([h.make_node("Add", ["x", "e8"], [f"t{name}"]),  # noqa: E731
                                        h.make_node("Cast", [f"t{name}"], [f"f{name}"], to=T.FLOAT)], name, [],
                                       [h.make_tensor_value_info(f"f{name}", T.FLOAT, [3])])
    model(tmp_path / "branch.onnx", [h.make_node("ReduceSum", ["x"], ["sum"], keepdims=0), h.make_node("Greater", ["sum", "zero"], ["c"]),
                                     h.make_node("If", ["c"], ["f"], then_branch=branch("a"), else_branch=branch("b")),
                                     h.make_node("Sub", ["f", "e8"], ["y"])],
          [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])], [f32(1e8, "e8"), f32(0, "zero")], opset=17)
    half = nh.from_array(np.array(0, np.float16), "half")
    model(tmp_path / "trip.onnx", [h.make_node("CastLike", ["x", "half"], ["hx"]), h.make_node("CastLike", ["hx", "like"], ["y"])],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], [half, f32(0, "like")], opset=17)
    body = case(tmp_path, "castlike", None, {"i": np.array([16777217, 16777219, 3], np.int64)}) + \
        case(tmp_path, "trip", None, {"x": np.array([70000, 1.0001, 65519, 3.14159], np.float32)}) + \
        case(tmp_path, "branch", None, {"x": np.array([1, 0.5, 3], np.float32)}) + \
        case(tmp_path, "double", None, {"x": np.zeros(3, np.float32)}) + \
        case(tmp_path, "optional", None, {"x": np.array([1e8, 1, -1e8, 1], np.float32)}) + \
        case(tmp_path, "scalars", None, {"x": np.array([1e8, 1], np.float32)}) + \
        case(tmp_path, "no_trip", None, {"x": np.array([1e8, 1e8], np.float32)}) + \
        case(tmp_path, "groups", None, {"x": (100 + 0.1 * np.random.default_rng(0).standard_normal((1, 4, 8))).astype(np.float32)})
    done, cells = run(write_matrix, body)
    for name in cells:
        assert cells[name]["reference"] == "onnx.reference, every floating type made float64", (name, cells[name])
        assert cells[name]["reference_check"].startswith("agrees with onnxruntime"), (name, cells[name]["reference_check"])
    # onnxruntime computes the model: the model's own rounding (float32(16777217) is 2^24) is the reference's
    assert (cells["castlike"]["status"], cells["castlike"]["max_abs"]) == ("pass", 0.0), cells["castlike"]
    assert (cells["double"]["status"], cells["double"]["max_abs"]) == ("pass", 0.0), cells["double"]
    assert (cells["scalars"]["status"], cells["scalars"]["max_abs"]) == ("pass", 3.0), cells["scalars"]  # within rtol at 3e8
    # float32 loses what float64 keeps: the 1s of the sums, and a + x - x
    assert (cells["optional"]["status"], cells["optional"]["max_abs"]) == ("fail", 1.0), cells["optional"]
    assert (cells["no_trip"]["status"], cells["no_trip"]["max_abs"]) == ("fail", 1.0), cells["no_trip"]
    assert cells["groups"]["status"] == "fail" and cells["groups"]["max_abs"] > 0.1, cells["groups"]
    assert (cells["branch"]["status"], cells["branch"]["max_abs"]) == ("fail", 3.0), cells["branch"]
    assert cells["trip"]["status"] == "pass", cells["trip"]


def _referee_pid(parent: int | None = None) -> int:
    """The pid of the referee (reference/referee_process.py) of `parent`, else of this process."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"referee_process" in (proc / "cmdline").read_bytes() and \
                    int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == (parent or os.getpid()):
                return int(proc.name)
        except (OSError, ValueError):
            continue
    raise AssertionError("no referee process")


def test_a_referee_that_gives_no_answer_is_ended_at_the_rows_deadline(tmp_path, write_matrix):
    """Issue 41, sweep 12 E9: a referee process that stopped answering (SIGSTOP) held `run` past
    `timeout_s = 5` until it was killed, 100 s later. E10: while it worked, a copy of the user's
    model lay in $TMPDIR/trtmatrix-referee-*, which a kill -9 of trtmatrix then left for good."""
    import signal
    import time

    rng = np.random.default_rng(4)
    body = ""
    for name in ("a", "b", "c"):
        model(tmp_path / f"{name}.onnx", [h.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])])
        x = rng.standard_normal(3).astype(np.float32)
        body += case(tmp_path, name, None, {"x": x}, expected={"y": np.maximum(x, 0)} if name == "a" else None) + \
            "timeout_s = 4\n"
    config = write_matrix(PROFILES + body, environments=(ENV,))
    (temp := tmp_path / "tmp").mkdir()
    running = subprocess.Popen([TRTMATRIX, "run", "-c", str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "COLUMNS": "250", "TMPDIR": str(temp)})
    started = time.monotonic()
    while True:
        try:
            referee = _referee_pid(running.pid)
            break
        except AssertionError:
            assert running.poll() is None and time.monotonic() - started < 120, "no referee started"
            time.sleep(0.01)
    os.kill(referee, signal.SIGSTOP)
    try:
        time.sleep(1)
        assert not list(temp.glob("trtmatrix-referee-*")), "a copy of the model on disk"
        out, err = running.communicate(timeout=120)
    finally:  # a failure leaves no stopped process behind
        if running.poll() is None:
            running.kill()
            os.kill(referee, signal.SIGKILL)
    cells = read_run(list_runs(config.parent / "reports")[-1]).set_index("case").to_dict("index")
    # the request stopped is the first case's (a, whose own file is its reference) unless it was answered first
    cut = [name for name, cell in cells.items() if "within timeout_s = 4 s" in f"{cell['error']} {cell['reference_check']}"]
    assert len(cut) == 1, (cells, err)
    if cut == ["a"]:  # judged against the file alone, its check said to be stopped
        assert cells["a"]["status"] == "pass" and "judged against your file alone" in cells["a"]["reference_check"]
    else:
        assert cells[cut[0]]["status"] == "no_reference", cells
    assert all(cell["status"] == "pass" for name, cell in cells.items() if name not in cut), cells
    assert not Path(f"/proc/{referee}").exists()  # ended, and waited for


def test_a_referee_ended_from_outside_is_no_crash_of_the_model():
    """Issue 41, sweep 12 E8: a referee killed by SIGKILL (the OOM killer) was "onnxruntime crashed …
    evaluating the model", and that unchecked reference was kept with the artifact for good. Ended
    from outside, it is RefereeKilled (the preparation fails, and is made again next time); onnxruntime
    ending its own process (an abort, a SIGFPE) is still a crash of the model's."""
    import signal
    import threading
    import time

    from matrix.reference.referee_process import RefereeCrashed, RefereeKilled, in_referee_process

    assert in_referee_process(len, [1, 2]) == 2
    threading.Timer(1.0, os.kill, (_referee_pid(), signal.SIGKILL)).start()
    with pytest.raises(RefereeKilled, match=r"ended from outside \(killed by SIGKILL\)"):
        in_referee_process(time.sleep, 30)
    with pytest.raises(RefereeCrashed, match=r"killed by SIGABRT"):
        in_referee_process(os.abort)
    assert in_referee_process(len, [1]) == 1  # started again


def test_sibling_scopes_doubles_in_branches_nan_variances_and_undeclared_loop_shapes(tmp_path, write_matrix):
    """Issue 41, sweep 14: G2, two If branches each with a value `v` of another type (int64, float32):
    the float32 one's Cast to FLOAT was rounded again and (x + 1e8) - 1e8 passed at 0; G3, a DOUBLE made
    in a branch and narrowed in the main graph was not rounded, and right engines failed by 64; G4,
    onnxruntime's one-pass variance of a GroupNormalization group went negative (NaN for the group) and
    the row was disputed, not judged; G5, a zero-trip Loop whose body declares no shape for its scan
    output gave [0] where onnxruntime gives [0, 2, 3], disputed. G7, Cast(STRING → FLOAT) parsed in
    float64, and right engines failed; G8, a HannWindow without `output_datatype` (FLOAT) left the node
    after it without a float64 evaluation, and onnxruntime's float32 stood in."""
    f32 = lambda value, name: nh.from_array(np.array(value, np.float32), name)  # noqa: E731

    def taken(kind: str, name: str):
        start = h.make_node("Add", ["i", "zi"], ["v"]) if kind == "int" else h.make_node("Add", ["x", "e8"], ["v"])
        return h.make_graph([start, h.make_node("Cast", ["v"], ["c"], to=T.FLOAT)], name, [], [h.make_tensor_value_info("c", T.FLOAT, [3])])
    model(tmp_path / "scopes.onnx", [h.make_node("If", ["c0"], ["f"], then_branch=taken("int", "then"), else_branch=taken("float", "else")),
                                     h.make_node("Sub", ["f", "e8"], ["y"])],
          [("i", T.INT64, [3]), ("x", T.FLOAT, [3]), ("c0", T.BOOL, [])], [("y", T.FLOAT, [3])],
          [f32(1e8, "e8"), nh.from_array(np.array(0, np.int64), "zi")], opset=17)
    double = lambda name: h.make_graph([h.make_node("Constant", [], ["d"], value=nh.from_array(  # noqa: E731
        np.array([1 + 2.0 ** -30, 1 + 3 * 2.0 ** -24, 2.0]), "dv"))], name, [], [h.make_tensor_value_info("d", T.DOUBLE, [3])])
    model(tmp_path / "doubles.onnx", [h.make_node("If", ["c0"], ["dd"], then_branch=double("then"), else_branch=double("else")),
                                      h.make_node("Cast", ["dd"], ["f"], to=T.FLOAT), h.make_node("Sub", ["f", "one"], ["s"]),
                                      h.make_node("Mul", ["s", "p30"], ["m"]), h.make_node("Add", ["m", "x"], ["y"])],
          [("x", T.FLOAT, [3]), ("c0", T.BOOL, [])], [("y", T.FLOAT, [3])], [f32(1, "one"), f32(2 ** 30, "p30")], opset=17)
    model(tmp_path / "nan.onnx", [h.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=2, epsilon=1e-5)],
          [("x", T.FLOAT, [1, 4, 3])], [("y", T.FLOAT, [1, 4, 3])], [f32([2, 3, -0.5, 1.5], "scale"), f32([10, -2, 1, 0.25], "bias")],
          opset=21)
    body = h.make_graph([h.make_node("Add", ["a_in", "x"], ["a_out"]), h.make_node("Identity", ["c_in"], ["c_out"]),
                         h.make_node("Expand", ["a_out", "s32"], ["e"]), h.make_node("Transpose", ["e"], ["scan"], perm=[1, 0])], "body",
                        [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                         h.make_tensor_value_info("a_in", T.FLOAT, [2])],
                        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("a_out", T.FLOAT, [2]),
                         h.make_tensor_value_info("scan", T.FLOAT, None)], [nh.from_array(np.array([3, 2], np.int64), "s32")])
    model(tmp_path / "no_shape.onnx", [h.make_node("Loop", ["n", "", "a0"], ["a", "ys"], body=body), h.make_node("Add", ["a", "x"], ["p"]),
                                       h.make_node("Sub", ["p", "x"], ["y"])],
          [("x", T.FLOAT, [2])], [("y", T.FLOAT, [2]), ("ys", T.FLOAT, [None, 2, 3])],
          [nh.from_array(np.array(0, np.int64), "n"), f32([1, 0.5], "a0")], opset=17)
    model(tmp_path / "parse.onnx", [h.make_node("Cast", ["s"], ["f"], to=T.FLOAT), h.make_node("Sub", ["f", "big"], ["y"])],
          [("s", T.STRING, [3])], [("y", T.FLOAT, [3])], [f32(2 ** 24, "big")], opset=17)
    model(tmp_path / "window.onnx", [h.make_node("HannWindow", ["n"], ["w"]), h.make_node("Mul", ["x", "w"], ["xw"]),
                                     h.make_node("Add", ["xw", "e8"], ["a"]), h.make_node("Sub", ["a", "e8"], ["y"])],
          [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], [nh.from_array(np.array(4, np.int64), "n"), f32(1e8, "e8")], opset=17)
    no = np.array(False)
    x = np.array([1, 0.5, 3], np.float32)
    body = case(tmp_path, "scopes", None, {"i": np.array([16777217, 16777219, 3], np.int64), "x": x, "c0": no}) + \
        case(tmp_path, "doubles", None, {"x": x, "c0": no}) + \
        case(tmp_path, "nan", None, {"x": (100 + 0.1 * np.random.default_rng(0).standard_normal((1, 4, 3))).astype(np.float32)}) + \
        case(tmp_path, "no_shape", None, {"x": np.array([1e8, 1e8], np.float32)}) + \
        case(tmp_path, "parse", None, {"s": np.array(["16777217", "16777219", "3"])}) + \
        case(tmp_path, "window", None, {"x": np.array([1, 1.5, 3, 2.5], np.float32)})
    done, cells = run(write_matrix, body)
    for name in cells:
        assert cells[name]["reference"] == "onnx.reference, every floating type made float64", (name, cells[name])
    assert (cells["scopes"]["status"], cells["scopes"]["max_abs"]) == ("fail", 3.0), cells["scopes"]  # float32 loses x
    assert cells["doubles"]["status"] == "pass", cells["doubles"]  # the model's own Cast to FLOAT, as onnxruntime
    assert cells["nan"]["status"] == "fail" and cells["nan"]["nan_count"] > 0, cells["nan"]  # NaN where float64 is not
    assert (cells["no_shape"]["status"], cells["no_shape"]["max_abs"]) == ("fail", 1.0), cells["no_shape"]
    assert (cells["parse"]["status"], cells["parse"]["max_abs"]) == ("pass", 0.0), cells["parse"]  # float32's 2^24
    assert (cells["window"]["status"], cells["window"]["max_abs"]) == ("fail", 3.0), cells["window"]  # x·w lost to 1e8


def test_precision_attributes_bit_casts_and_sparse_weights_in_the_float64_evaluation():
    """Issue 41, sweep 13, the float64 evaluation itself (these opsets are past what onnxruntime 1.20
    loads): F9, Attention's `softmax_precision = FLOAT` kept its logits in float32 (1e8 and 1e8 + 1
    one value); F10, BitCast's `to` was widened to DOUBLE, which onnx.reference refuses (bits of another
    width); F1, DequantizeLinear's `output_dtype = FLOAT16` did not round; F13, a sparse weight had no
    value, and its consumer no evaluation."""
    from matrix.reference.float64_graph import float64_values

    def evaluated(nodes, inputs, initializers=(), opset=23, sparse=()):
        graph = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, h.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                                          for n, v in inputs.items()], [h.make_tensor_value_info("y", T.FLOAT, None)],
                             list(initializers), sparse_initializer=list(sparse))
        got = float64_values(h.make_model(graph, opset_imports=[h.make_opsetid("", opset)]), inputs)
        assert not got.missing, got.missing
        return got.values["y"]

    logits = {"q": np.array([[[[1e4, 1]]]], np.float32), "k": np.array([[[[1e4, 0], [1e4, 1]]]], np.float32),
              "v": np.array([[[[0], [1]]]], np.float32)}
    y = evaluated([h.make_node("Attention", ["q", "k", "v"], ["y"], scale=1.0, softmax_precision=T.FLOAT)], logits)
    assert abs(float(y.ravel()[0]) - 1 / (1 + np.exp(-1.0))) < 1e-12  # softmax([1e8, 1e8 + 1]) · [0, 1]
    bits = np.array([1, np.pi, 16777218], np.float32).view(np.int32)
    y = evaluated([h.make_node("BitCast", ["b"], ["f"], to=T.FLOAT), h.make_node("Mul", ["f", "two"], ["y"])], {"b": bits},
                  [nh.from_array(np.array(2, np.float32), "two")], opset=26)
    np.testing.assert_array_equal(y, 2 * bits.view(np.float32).astype(np.float64))
    q = np.array([127, 1, -3, 100], np.int8)
    y = evaluated([h.make_node("DequantizeLinear", ["q", "scale"], ["d"], output_dtype=T.FLOAT16),
                   h.make_node("Cast", ["d"], ["y"], to=T.FLOAT)], {"q": q}, [nh.from_array(np.array(0.0123, np.float32), "scale")])
    np.testing.assert_array_equal(y, (q * np.float64(np.float32(0.0123))).astype(np.float16).astype(np.float64))
    weight = h.make_sparse_tensor(nh.from_array(np.array([1e8, 1, 1, 1], np.float32), "w"),
                                  nh.from_array(np.array([0, 5, 10, 15], np.int64), "w_indices"), [4, 4])
    y = evaluated([h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("CumSum", ["m", "axis"], ["y"])],
                  {"x": np.array([[1, 1, -1e8, 1]], np.float32)}, [nh.from_array(np.array(1, np.int64), "axis")], opset=13,
                  sparse=[weight])
    np.testing.assert_array_equal(y, [[1e8, 1e8 + 1, 1, 2]])


def test_a_loop_in_a_local_function_keeps_the_rows_deadline():
    """Issue 41, sweep 14 G10: a Loop in a model-local function (a function-preserving exporter's)
    escaped the deadline of a Loop's float64 evaluation: prepare ran as long as the Loop did."""
    from matrix.graph_walk import slow_in_float64

    body = h.make_graph([h.make_node("Identity", ["c_in"], ["c_out"])], "body",
                        [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, [])],
                        [h.make_tensor_value_info("c_out", T.BOOL, [])])
    function = h.make_function("local", "endless", ["go"], ["z"], [h.make_node("Loop", ["", "go"], [], body=body),
                                                                  h.make_node("Identity", ["go"], ["z"])],
                               [h.make_opsetid("", 17)])
    graph = h.make_graph([h.make_node("endless", ["go"], ["y"], domain="local")], "g",
                         [h.make_tensor_value_info("go", T.BOOL, [])], [h.make_tensor_value_info("y", T.BOOL, [])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("local", 1)], functions=[function])
    assert slow_in_float64(model) == "a Loop or Scan"


def test_an_output_onnx_reference_computes_in_float32_has_no_float64_evaluation():
    """Issue 41, sweep 14 G12: onnx.reference's TreeEnsembleClassifier sums its scores in float32
    whatever its input (1e8 + 1.5 - 1e8 is 0, the class wrong), and that was the "float64" reference
    onnxruntime's own float32 passed against at 0. Such a node now has no float64 evaluation, saying why."""
    from matrix.reference.float64_graph import float64_values

    node = h.make_node("TreeEnsembleClassifier", ["X"], ["label", "prob"], domain="ai.onnx.ml", nodes_treeids=[0, 1, 2],
                       nodes_nodeids=[0, 0, 0], nodes_modes=["LEAF"] * 3, nodes_featureids=[0] * 3, nodes_values=[0.0] * 3,
                       nodes_truenodeids=[0] * 3, nodes_falsenodeids=[0] * 3, class_treeids=[0, 1, 2, 0],
                       class_nodeids=[0, 0, 0, 0], class_ids=[1, 1, 1, 0], class_weights=[1e8, 1.5, -1e8, 0.25],
                       classlabels_int64s=[0, 1], post_transform="NONE")
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("X", T.FLOAT, [1, 2])],
                         [h.make_tensor_value_info("label", T.INT64, [1]), h.make_tensor_value_info("prob", T.FLOAT, [1, 2])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 3)], ir_version=8)
    got = float64_values(model, {"X": np.array([[1e8, 1.5]], np.float32)})
    assert "prob" not in got.values
    assert got.missing == {"TreeEnsembleClassifier#0": "no float64 reference for TreeEnsembleClassifier: TypeError: "
                                                       "onnx.reference computes 'prob' in float32, not float64"}
