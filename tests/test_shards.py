"""`run --shard I/N` and `merge`: N CI jobs, each one part of the plan, put together as one run
equal to the unsharded run cell by cell — through the real command line."""

import json
import shutil
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from conftest import PROFILES, make_tiny_model, tiny_case
from matrix.plan import build_plan, shard_plan
from matrix.store import list_runs, read_run
from test_reports_cli import cli

ENVS = ("ort-1.17", "ort-1.32", "trt-8.6")  # trt-8.6: skipped here, a status like any other


@pytest.fixture
def matrix(write_matrix, tmp_path):
    for name in "abc":
        (tmp_path / name).mkdir()
    first, second = make_tiny_model(tmp_path / "a"), make_tiny_model(tmp_path / "b", seed=1)
    body = PROFILES + tiny_case(*first, ("fp32", "fp16")) + tiny_case(*second, ("fp32", "fp16")).replace("tiny]", "tiny2]")
    return write_matrix(body, environments=ENVS)


def test_shards_partition_the_plan_by_environment_and_balance_it(matrix):
    plan = build_plan(matrix)
    for count in (1, 2, 3, 4, 7):
        parts = [shard_plan(plan, i, count).cells for i in range(1, count + 1)]
        ids = [c.cell_id for part in parts for c in part]
        assert sorted(ids) == sorted(c.cell_id for c in plan.cells)  # every cell exactly once
        assert parts == [shard_plan(plan, i, count).cells for i in range(1, count + 1)]  # deterministic
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= len(plan.cells) // len(ENVS)  # at most one environment apart
        if count <= len(ENVS):  # environments are not split while there are enough of them
            assert all(sum(any(c.env == env for c in p) for p in parts) == 1 for env in ENVS)


def test_merged_shards_equal_the_unsharded_run(matrix, tmp_path):
    assert cli("run", "-c", str(matrix)).returncode == 0
    whole = read_run(list_runs(tmp_path / "reports")[-1])
    for shard in ("1/2", "2/2"):
        done = cli("run", "-c", str(matrix), "--shard", shard, "--no-reuse")
        assert done.returncode == 0, done.stderr
    shards = list_runs(tmp_path / "reports")[-2:]
    assert [json.loads((s / "run.json").read_text())["shard"] for s in shards] == ["1/2", "2/2"]
    assert 0 < len(read_run(shards[0])) < len(whole)

    # As a CI merge job has them: run folders downloaded elsewhere, given by path.
    downloaded = [shutil.copytree(s, tmp_path / "downloaded" / f"shard-{i}") for i, s in enumerate(shards)]
    merged = cli("merge", "-c", str(matrix), *map(str, downloaded), "--junit-xml", str(tmp_path / "junit.xml"))
    assert merged.returncode == 0, merged.stderr
    assert len(list(ET.parse(tmp_path / "junit.xml").getroot().iter("testcase"))) == len(whole)
    run_dir = list_runs(tmp_path / "reports")[-1]
    assert merged.stdout.splitlines()[-1] == str(run_dir)  # the last line, as `run` prints it
    assert "merged from 2 shards" in (run_dir / "report.html").read_text()
    together = read_run(run_dir)
    assert list(together["cell_id"]) == list(whole["cell_id"])  # the plan's order, not shard by shard
    pd.testing.assert_frame_equal(together[["cell_id", "status"]], whole[["cell_id", "status"]])
    assert together["max_abs"].tolist() == pytest.approx(whole["max_abs"].tolist(), nan_ok=True)
    assert (together["run_id"] == run_dir.name).all()
    # One whole run: every cell's outputs and reference there, the index lists it, re-judging works.
    assert len(list((run_dir / "cells").glob("*.npz"))) == together["outputs"].ne("[]").sum()
    assert run_dir.name in (tmp_path / "reports" / "index.html").read_text()
    assert cli("report", run_dir.name, "-c", str(matrix)).returncode == 0


def test_merge_refuses_what_is_not_all_shards_of_one_plan(matrix, write_matrix, tmp_path):
    assert cli("run", "-c", str(matrix), "--shard", "1/2").returncode == 0
    first = list_runs(tmp_path / "reports")[-1]
    missing = cli("merge", "-c", str(matrix), first.name)
    assert missing.returncode == 2 and "missing 2/2" in missing.stderr

    other = write_matrix(PROFILES + tiny_case(*make_tiny_model(tmp_path / "c", seed=2)), environments=ENVS,
                         name="other.toml")
    assert cli("run", "-c", str(other), "--shard", "2/2").returncode == 0
    second = list_runs(tmp_path / "reports")[-1]
    different = cli("merge", "-c", str(matrix), first.name, second.name)
    assert different.returncode == 2 and "shards of different plans" in different.stderr
    assert list_runs(tmp_path / "reports")[-1] == second  # nothing written

    unsharded = cli("run", "-c", str(matrix), "--env", "trt-8.6")
    assert unsharded.returncode == 0
    refused = cli("merge", "-c", str(matrix), first.name, list_runs(tmp_path / "reports")[-1].name)
    assert refused.returncode == 2 and "is not a shard" in refused.stderr
    assert cli("run", "-c", str(matrix), "--shard", "3/2").returncode == 2


def test_a_sharded_night_and_its_merge_go_red_on_a_regression(write_matrix, tmp_path):
    """A shard is compared with the previous whole run (unsharded or merged), never with the other
    shard of its night, and `merge` judges the merged run as `run` does: exit 1 for a regression.
    Before, the second shard compared with the first (no cell in common: exit 0) and `merge`
    compared with nothing (exit 0): a sharded nightly let a regression through.
    Issue 41, sweep 6 #11: `merge` exited 1 for a disputed cell without the line `run` prints for
    it (nor the expected file's): a CI log said only "exit 1"."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save_model

    model, inputs = make_tiny_model(tmp_path)
    expected = tmp_path / "expected.npz"
    truth = make_expected(model, inputs)
    np.savez(expected, y=truth)
    # Floor(x / 0.1) at 0.7: 7 in float32, 6 in float64: no reference can say which (disputed)
    bucket = helper.make_graph([helper.make_node("Div", ["x", "tenth"], ["q"]), helper.make_node("Floor", ["q"], ["y"])],
                               "bucket", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                               [numpy_helper.from_array(np.array(0.1, np.float32), "tenth")])
    save_model(helper.make_model(bucket, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), tmp_path / "bucket.onnx")
    np.savez(tmp_path / "bucket.npz", x=np.array([0.7, 1.1], np.float32))
    config = write_matrix(PROFILES + tiny_case(model, inputs) + f'expected = "{expected}"\n'
                          + tiny_case(tmp_path / "bucket.onnx", tmp_path / "bucket.npz").replace("tiny]", "bucket]"),
                          environments=("ort-1.17", "ort-1.32"))
    night = cli("run", "-c", str(config))  # night 1: all pass, but for the disputed cells, said
    assert night.returncode == 1 and "newly fail" not in night.stderr, night.stderr
    # the engine ran beside the step (sweep 17 K6), and the line says so (sweep 19 M18)
    disputed = ("2 cells of case bucket judged only where no step decides, reference disputed: output 'y' is decided "
                "by rounding at node")
    assert disputed in night.stderr, night.stderr
    np.savez(expected, y=truth + 1.0)  # night 2: every cell now fails
    codes = [cli("run", "-c", str(config), "--shard", shard).returncode for shard in ("1/2", "2/2")]
    assert codes == [1, 1]
    shards = [str(p) for p in list_runs(tmp_path / "reports")[-2:]]
    merged = cli("merge", "-c", str(config), *shards)
    assert merged.returncode == 1 and "2 cells newly fail compared with run" in merged.stderr, merged.stderr
    assert disputed in merged.stderr and "2 cells of case tiny fail against your expected file alone" in merged.stderr


def make_expected(model, inputs):
    import numpy as np
    import onnxruntime

    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, dict(np.load(inputs)))[0].astype(np.float64)
