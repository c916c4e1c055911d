"""Issue 41, the fifteenth and sixteenth sweeps: verdicts that lied at trtmatrix's own edges, each
reproduced through real `trtmatrix run` processes on a real onnxruntime venv; each test failed on
main 13d3344."""

from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto as T, helper

from conftest import PROFILES, matrix_file
from matrix.store import list_runs, read_run
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
    graph input, so it was not "beside" the pattern, and the cell was the Pad → MaxPool entry's xfail."""
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
