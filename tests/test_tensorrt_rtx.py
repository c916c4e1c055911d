"""TensorRT for real: TensorRT-RTX 1.7 (wheels from the package index, in a venv made by the code
under test, and in a container built here) parses and builds the seed cases on this CPU. Builds
are real; inference is not (no GPU here, and TensorRT-RTX refuses the H100 we were lent): those
cells must end `built`, never `pass`. Where this machine stops is tested too: a GPU the release
supports makes the builder target it, and without a CUDA driver TensorRT says why it cannot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper

from conftest import NO_REAL_GPU, PROFILES, REPO, SMALL, fake_nvidia_smi
from matrix.environments import open_backend
from matrix.environments.staging import stage_worker
from matrix.plan import build_plan
from matrix.prepare import artifact_dir
from matrix.report.junit import write_junit
from matrix.report.upgrade import regressions
from matrix.run import MatrixRun
from matrix.statuses import change
from matrix.store import list_runs, read_run
from matrix.worker.trt_runnable import not_runnable_reason, rtx_capabilities

RTX = "trt-rtx-1.7"
BODY = """
    [profiles.fp32]
    precision = "fp32"
    [profiles.fp16]
    precision = "fp16"
    [profiles.fp16-softmax-fp32]
    precision = "fp16"
    keep_fp32 = ["Softmax"]
    [profiles.weak]
    precision = "fp16"
    typing = "weak"
    [cases.mha_transformer_block]
    profiles = ["fp32", "fp16", "fp16-softmax-fp32", "weak"]
    options = {mha}
    [cases.layernorm_block]
    profiles = ["fp32", "fp16"]
    options = {ln}
    """.format(mha=SMALL["mha_transformer_block"], ln=SMALL["layernorm_block"])


@pytest.fixture(scope="module")
def built(tmp_path_factory, cache_dir):
    from conftest import matrix_file

    home = tmp_path_factory.mktemp("rtx")
    config = matrix_file(home, cache_dir, BODY, environments=(RTX, "ort-1.32"))
    return read_run(MatrixRun(build_plan(config)).execute()).set_index("cell_id")


def test_seed_cases_build_on_tensorrt_rtx_and_none_passes(built):
    rtx = built[built["env"] == RTX]
    ran = rtx[rtx["profile"] != "weak"]
    assert set(ran["status"]) == {"built"} and (ran["engine"] == "tensorrt-rtx").all()
    assert (ran["engine_version"] == "1.7.1.116").all()
    assert ran["error"].str.startswith("built with TensorRT-RTX 1.7.1.116; not run: no NVIDIA GPU").all()
    assert (ran["build_s"] > 0).all() and (ran["engine_bytes"] > 0).all()
    assert ran["max_abs"].isna().all() and ran["outputs"].eq("[]").all()  # nothing was measured


def test_build_only_cells_fork_from_the_supervisor(built, cache_dir):
    """They touch no CUDA, so they need no new interpreter each (engines.fork_safe)."""
    key = built.loc[f"layernorm_block/batch=2/fp32/{RTX}", "content_key"]
    result = json.loads((cache_dir / "results" / RTX / key[:24] / "result.json").read_text())
    assert (result["status"], result["cell_start"]) == ("built", "fork")


def test_fp16_builds_the_fp16_model_and_keep_fp32_is_checked_in_the_typed_network(built):
    row = "mha_transformer_block/batch=1/{}/" + RTX
    fp32, fp16, kept = (built.loc[row.format(p)] for p in ("fp32", "fp16", "fp16-softmax-fp32"))
    # Strongly typed: FP16 comes from the FP16 ONNX copy: its matrix products are HALF in the network.
    matmuls = lambda cell: {d for layer in json.loads(cell["network_layers"])  # noqa: E731
                            if layer["type"] == "MATRIX_MULTIPLY" for d in layer["dtypes"]}
    assert matmuls(fp16) == {"HALF"} and matmuls(fp32) == {"FLOAT"}
    # Every layer of the parsed network names the ONNX node it came from (ILayer.metadata).
    softmax = [layer for layer in json.loads(kept["network_layers"]) if layer["type"] == "SOFTMAX"]
    assert softmax and all(layer["onnx"] == ["/attn/Softmax"] and layer["dtypes"] == ["FLOAT"] for layer in softmax)
    assert kept["precision_check"].startswith(f"ok: {len(softmax)}/{len(softmax)} requested FP32 layers are FP32")


def test_a_setting_a_strongly_typed_build_cannot_take_is_skipped_with_the_reason(built):
    weak = built.loc[f"mha_transformer_block/batch=1/weak/{RTX}"]
    assert weak["status"] == "skipped" and "strongly typed networks only" in weak["error"]
    elsewhere = built.loc["mha_transformer_block/batch=1/weak/ort-1.32"]
    assert elsewhere["status"] == "skipped" and "the onnxruntime engine has no typing" in elsewhere["error"]


def test_the_parsers_refusal_is_unsupported_in_its_own_words(write_matrix, tmp_path):
    """Det: onnxruntime computes it, TensorRT-RTX's ONNX parser has no importer for it."""
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"], name="det")], "det",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, tmp_path / "det.onnx")
    np.savez(tmp_path / "det.npz", x=np.random.default_rng(0).standard_normal((2, 3, 3)).astype(np.float32))
    config = write_matrix(f"""
        [profiles.fp32]
        precision = "fp32"
        [cases.det]
        onnx = "{tmp_path / 'det.onnx'}"
        inputs = "{tmp_path / 'det.npz'}"
        profiles = ["fp32"]
        """, environments=(RTX, "ort-1.32"))
    cells = read_run(MatrixRun(build_plan(config)).execute()).set_index("env")
    assert cells.loc["ort-1.32", "status"] == "pass"
    refused = cells.loc[RTX]
    assert refused["status"] == "unsupported"
    assert refused["error"].startswith("Det (UNSUPPORTED_NODE) — TensorRT-RTX 1.7.1.116's ONNX parser: In node 0")
    assert "operator: Det" in refused["error"] and "UNSUPPORTED_NODE" in refused["error"]


def _cell_in_venv(tmp_path, cache_dir, facts: dict, body: str = BODY,
                  cell: str = f"layernorm_block/batch=2/fp32/{RTX}") -> dict:
    """One cell (a layernorm one by default) run by the worker's own cell code, in the TensorRT-RTX
    venv, told that it sees the GPU `facts` describes (what probe.describe would find on such a host)."""
    from conftest import matrix_file

    config = matrix_file(tmp_path, cache_dir, body, environments=(RTX,))
    plan = build_plan(config)
    one = build_plan(config, only_cells=[cell])
    MatrixRun(one).execute()  # prepares the artifacts
    artifacts = artifact_dir(cache_dir, one.cells[0].case, one.cells[0].artifact_key)
    envdef = plan.envs[RTX]
    backend = open_backend(envdef, cache_dir, stage_worker(cache_dir), "test")
    backend.prepare()
    out = tmp_path / "cell"
    out.mkdir()
    spec = {"cell_id": "x", "engine": "tensorrt", "model": str(artifacts / "model.onnx"), "out_dir": str(out),
            "profile": plan.profile("fp32").model_dump(mode="json"), "device_facts": facts}
    script = textwrap.dedent(f"""
        import json, sys
        from trtmatrix_worker.cell import execute, log
        print(json.dumps(execute(json.loads(sys.argv[1]) | {{"inputs": {str(artifacts / 'inputs.npz')!r}}}, {{}}), default=str))
        """)
    done = subprocess.run([str(backend.python), "-c", script, json.dumps(spec)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(stage_worker(cache_dir)), **envdef.worker_environment()})
    return json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else {"stderr": done.stderr}


def test_a_gpu_the_release_does_not_support_is_named_and_its_engine_still_built(tmp_path, cache_dir):
    result = _cell_in_venv(tmp_path, cache_dir, {"gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"})
    assert result["status"] == "built" and result["info"]["engine_bytes"] > 0
    assert result["error"] == ("built with TensorRT-RTX 1.7.1.116; not run: NVIDIA H100 80GB HBM3 has compute "
                               "capability 9.0, which TensorRT-RTX 1.7.1.116 does not support (it supports "
                               "7.5, 8.0, 8.6, 8.9, 12.0, 12.1)")


def test_a_supported_gpu_is_built_for_and_here_the_builder_says_why_it_cannot(tmp_path, cache_dir):
    """An L4 (8.9) is supported: the engine is built for the GPU in hand (ComputeCapability.CURRENT),
    which needs a CUDA driver. None here: the builder's own message, not a bare 'None'."""
    result = _cell_in_venv(tmp_path, cache_dir, {"gpu": "NVIDIA L4", "compute_capability": "8.9"})
    assert "RuntimeError: TensorRT-RTX 1.7.1.116 did not build the engine" in result["stderr"]
    assert "CUDA driver version is insufficient" in result["stderr"]


SUITE = """
    [profiles.fp32]
    precision = "fp32"
    [cases.node]
    suite = "onnx-backend-node"
    profiles = ["fp32"]
    include = {}
    """


def test_types_numpy_lacks_are_built_and_strings_run_where_onnxruntime_runs(tmp_path, cache_dir):
    """A build feeds no data, only shapes: suite tests of bfloat16 and float8 tensors are rows that
    TensorRT-RTX builds (they were left out as having no numpy type). onnxruntime's cells of them are
    skipped, saying why; a string test is onnxruntime's, skipped on TensorRT-RTX."""
    from conftest import matrix_file

    tests = ["test_cast_FLOAT_to_BFLOAT16", "test_dequantizelinear_e4m3fn", "test_strnormalizer_export_monday_casesensintive_nochangecase"]
    config = matrix_file(tmp_path, cache_dir, SUITE.format(json.dumps(tests)), environments=(RTX, "ort-1.32"))
    cells = read_run(MatrixRun(build_plan(config)).execute()).set_index("cell_id")["status"].to_dict()
    assert cells == {f"node/test={tests[0]}/fp32/{RTX}": "built", f"node/test={tests[0]}/fp32/ort-1.32": "skipped",
                     f"node/test={tests[1]}/fp32/{RTX}": "built", f"node/test={tests[1]}/fp32/ort-1.32": "skipped",
                     f"node/test={tests[2]}/fp32/{RTX}": "skipped", f"node/test={tests[2]}/fp32/ort-1.32": "pass"}
    # A matrix of TensorRT-RTX alone has no row of strings: left out, saying who takes them.
    alone = build_plan(matrix_file(tmp_path, cache_dir, SUITE.format(json.dumps(tests)), environments=(RTX,), name="alone.toml"))
    assert alone.left_out == {"node": {tests[2]: "string tensor (taken by onnxruntime; no such environment in this matrix)"}}


def test_on_a_gpu_it_supports_a_type_numpy_lacks_is_built_and_not_run(tmp_path, cache_dir):
    """Told it sees an L4 (which it supports), the worker still cannot feed or read a bfloat16
    array: the engine is built for the release's targets and the cell says why it did not run."""
    cell = f"node/test=test_cast_FLOAT_to_BFLOAT16/fp32/{RTX}"
    result = _cell_in_venv(tmp_path, cache_dir, {"gpu": "NVIDIA L4", "compute_capability": "8.9"},
                           SUITE.format('["test_cast_FLOAT_to_BFLOAT16"]'), cell)
    assert result["status"] == "built" and result["info"]["engine_bytes"] > 0, result
    assert result["error"] == ("built with TensorRT-RTX 1.7.1.116; its inputs or outputs are bfloat16 tensor, which "
                               "numpy has no type for: not run")


def test_which_gpus_a_release_runs_on_comes_from_its_own_enum():
    names = ["CURRENT", "NONE", "SM120", "SM121", "SM75", "SM80", "SM86", "SM89"]  # tensorrt_rtx 1.7.1's members
    supported = rtx_capabilities(names)
    assert supported == ["7.5", "8.0", "8.6", "8.9", "12.0", "12.1"]
    l4, h100, b200, next_gen = ({"gpu": g, "compute_capability": c} for g, c in
                                (("L4", "8.9"), ("H100", "9.0"), ("B200", "10.0"), ("X", "13.0")))
    assert not_runnable_reason("TensorRT-RTX", "1.7", l4, supported) is None
    assert "H100 has compute capability 9.0" in not_runnable_reason("TensorRT-RTX", "1.7", h100, supported)
    assert "10.0" in not_runnable_reason("TensorRT-RTX", "1.7", b200, supported)
    assert not_runnable_reason("TensorRT-RTX", "1.7", next_gen, supported) is None  # ">12.0", as 1.7.1 says
    assert not_runnable_reason("TensorRT", "10.8", h100) is None  # full TensorRT: every GPU it is given
    assert "no NVIDIA GPU" in not_runnable_reason("TensorRT", "10.8", {})


def test_built_is_good_for_regressions_and_its_own_group_in_the_upgrade_view(tmp_path):
    before = pd.DataFrame({"cell_id": ["a", "b", "c", "d"], "status": ["built", "built", "unsupported", "pass"]})
    now = before.assign(status=["error", "unsupported", "built", "built"], max_abs=np.nan, nan_count=0, inf_count=0)
    # A cell that built and now fails to build is a regression; a refusal by the parser is not one
    # by itself, and a cell that passed on a GPU and is built on a CPU host lost nothing.
    assert list(regressions(before, now)["cell_id"]) == ["a"]
    assert [change(a, b) for a, b in zip(before["status"], now["status"])] == [
        "newly failing", "newly unsupported", "newly supported", "other changes"]
    assert change("error", "built") == "newly building" and change("skipped", "built") == "not comparable"
    # Every change of status is a change: the parser accepts it now and the builder fails (a group of its
    # own, listed second: it is news, though nothing passed before); an error that now gives numbers.
    assert change("unsupported", "error") == change("unsupported", "fail") == "newly supported, failing"
    assert change("error", "fail") == "other changes"

    frame = pd.DataFrame({"env": RTX, "row_id": ["r1", "r2"], "status": ["built", "unsupported"], "build_s": [0.2, None],
                          "error": ["built with TensorRT-RTX 1.7.1.116; not run: no NVIDIA GPU", "parser refuses: Det"],
                          "max_abs": np.nan, "atol": 1e-4, "rtol": 1e-3, "known_issue": None, "log_tail": ""})
    write_junit(frame, tmp_path / "junit.xml", "run")
    xml = (tmp_path / "junit.xml").read_text()
    assert 'failures="0" errors="0" skipped="2"' in xml
    assert "built, not run: built with TensorRT-RTX 1.7.1.116" in xml and "unsupported: parser refuses: Det" in xml


@pytest.mark.docker
def test_the_container_builds_the_engine_the_venv_builds(docker_client, write_matrix, built):
    config = write_matrix(BODY, environments=(f"{RTX}-docker",))
    container = read_run(MatrixRun(build_plan(config, only_cells=[f"layernorm_block/batch=2/fp16/{RTX}-docker"])).execute())
    cell = container.iloc[0]
    assert cell["status"] == "built" and cell["image"].startswith("trtmatrix/trt-rtx-1-7-docker")
    assert cell["engine_bytes"] == built.loc[f"layernorm_block/batch=2/fp16/{RTX}", "engine_bytes"]


def test_a_warm_worker_builds_what_forked_cells_build_and_a_crash_ends_only_its_worker(tmp_path, cache_dir):
    """TensorRT's warm worker (by default on a GPU host; forced here, where there is none): the cells
    build one after another in one process, a crash ends that worker and a fresh one builds the next
    cell, and every engine is the one a forked cell builds."""
    from conftest import matrix_file

    body = """
        [profiles.fp32]
        precision = "fp32"
        [profiles.crash]
        precision = "fp32"
        inject = "crash"
        [profiles.fp16]
        precision = "fp16"
        [cases.layernorm_block]
        profiles = ["fp32", "crash", "fp16"]
        options = { tokens = 8, dim = 32, depth = 1 }
        """
    frames = {}
    for mode in ("fork", "warm"):
        home = tmp_path / mode
        home.mkdir()
        config = matrix_file(home, cache_dir, body, environments=(RTX,))
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TRTMATRIX_CELL_START", mode)
            frames[mode] = read_run(MatrixRun(build_plan(config), reuse=False).execute()).set_index("profile")
        built = frames[mode][frames[mode]["status"] == "built"]
        assert [json.loads((cache_dir / "results" / RTX / key[:24] / "result.json").read_text())["cell_start"]
                for key in built["content_key"]] == [mode, mode]
    fork, warm = frames["fork"], frames["warm"]
    assert list(warm["status"]) == list(fork["status"]) == ["built", "crash", "built"]
    assert warm.loc["crash", "error"] == "killed by SIGSEGV"
    for profile in ("fp32", "fp16"):
        assert warm.loc[profile, "engine_bytes"] == fork.loc[profile, "engine_bytes"] > 0
        assert warm.loc[profile, "network_layers"] == fork.loc[profile, "network_layers"]


@NO_REAL_GPU
def test_engine_caches_are_kept_per_image_and_gpu_model(tmp_path, cache_dir):
    """TensorRT's timing cache and TensorRT-RTX's runtime cache hold for one build of the engine on
    one GPU model: on a host of H100s and one of H200s (nvidia-smi faked; both 9.0, so the cells
    build and do not run) each cell is given the files of its own GPU model, in its environment's
    own folder, and the same files again run after run."""
    from conftest import matrix_file

    body = """
        [profiles.fp32]
        precision = "fp32"
        [cases.layernorm_block]
        profiles = ["fp32"]
        options = { tokens = 8, dim = 32, depth = 1 }
        """
    caches = {}
    for name, gpu in (("h100", "NVIDIA H100 80GB HBM3"), ("h200", "NVIDIA H200"), ("h100-again", "NVIDIA H100 80GB HBM3")):
        home = tmp_path / name
        home.mkdir()
        config = matrix_file(home, cache_dir, body, environments=(RTX,))
        done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--no-reuse"], cwd=REPO,
                              capture_output=True, text=True,
                              env={**os.environ, **fake_nvidia_smi(tmp_path / f"{name}-bin", [gpu])})
        assert done.returncode == 0, done.stdout + done.stderr
        cell = read_run(list_runs(home / "reports")[-1]).iloc[0]
        assert cell["status"] == "built" and f"not run: {gpu} has compute capability 9.0" in cell["error"]
        job = max((cache_dir / "jobs").glob(f"{RTX}*.json"), key=lambda path: path.stat().st_mtime)
        caches[name] = [(spec["timing_cache"], spec["runtime_cache"]) for spec in json.loads(job.read_text())["cells"]]
    [h100], [h200] = caches["h100"], caches["h200"]
    assert caches["h100-again"] == [h100] and set(h100).isdisjoint(h200)
    assert all(Path(path).parent == cache_dir / "timing" / RTX for path in h100 + h200)
    assert all("H100" in Path(path).name for path in h100) and all("H200" in Path(path).name for path in h200)


def rtx_gpu_missing_reason():
    """TensorRT-RTX runs engines on compute capability 7.5, 8.0, 8.6, 8.9 and 12.x (1.7.1), not 9.0 or 10.x."""
    try:
        caps = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.split()
    except OSError:
        return "no NVIDIA GPU here (nvidia-smi not found)"
    if not any(cap in ("7.5", "8.0", "8.6", "8.9") or int(cap.split(".")[0]) >= 12 for cap in caps):
        return f"no GPU here that TensorRT-RTX runs engines on (compute capabilities here: {caps or 'none'})"
    return None


@pytest.mark.gpu
@pytest.mark.skipif(rtx_gpu_missing_reason() is not None, reason=f"needs a GPU TensorRT-RTX runs on: {rtx_gpu_missing_reason()}")
def test_the_runtime_cache_keeps_compiled_kernels_for_the_next_cell_and_the_next_run(tmp_path, cache_dir):
    """NOT RUN: no GPU TensorRT-RTX runs on was lent. On one, the cells run and are judged; the warm
    worker's runtime cache is written after each cell, and a second run's worker loads it from the
    file, with the same numbers."""
    from conftest import matrix_file

    body = PROFILES + "".join(f'[cases.{case}]\nprofiles = ["fp32", "fp16"]\noptions = {SMALL[case]}\n'
                              for case in ("layernorm_block", "mha_transformer_block"))
    config = matrix_file(tmp_path, cache_dir, body, environments=(RTX,))
    runs = [read_run(MatrixRun(build_plan(config), reuse=False).execute()).set_index("cell_id") for _ in range(2)]
    first, second = runs
    assert set(first["status"]) <= {"pass", "fail"} and (first["device"] == "cuda").all()
    assert (first["max_abs"] == second["max_abs"]).all()
    logs = [(cache_dir / "results" / RTX / key[:24] / "cell.log").read_text() for key in second["content_key"]]
    assert "runtime cache" in logs[0] and ": loaded" in logs[0]  # the first cell of the second run's worker
    assert not any("runtime cache" in log for log in logs[1:])  # later cells: the worker's own, already loaded
    [cache_file] = (cache_dir / "timing" / RTX).glob("*.rtxcache")
    assert cache_file.stat().st_size > 0


def test_input_sets_build_one_engine_whose_profile_spans_them_and_pinned_shapes_are_said(write_matrix, tmp_path):
    """Batch 1 and batch 4 of one model: one engine (built by the first row, loaded by the other),
    its optimisation profile min = batch 1, opt = the first set, max = batch 4, as a deployed
    engine is. A shape tensor (Reshape's target, a graph input) cannot span: pinned, and said."""
    from matrix.report.html import key_number

    rng = np.random.default_rng(0)
    weight = onnx.numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W")
    dynamic = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul")], "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [weight]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    reshaped = helper.make_model(helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], "reshaped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(dynamic, tmp_path / "dynamic.onnx")
    onnx.save(reshaped, tmp_path / "reshaped.onnx")
    for batch in (1, 4):
        np.savez(tmp_path / f"b{batch}.npz", x=rng.standard_normal((batch, 16)).astype(np.float32))
    np.savez(tmp_path / "r.npz", x=rng.standard_normal((4, 16)).astype(np.float32), shape=np.array([8, 8]))
    body = PROFILES + f"""
        [cases.dynamic]
        onnx = "{tmp_path / 'dynamic.onnx'}"
        inputs = ["{tmp_path / 'b1.npz'}", "{tmp_path / 'b4.npz'}"]
        profiles = ["fp32"]
        [cases.reshaped]
        onnx = "{tmp_path / 'reshaped.onnx'}"
        inputs = "{tmp_path / 'r.npz'}"
        profiles = ["fp32"]
        """
    cells = read_run(MatrixRun(build_plan(write_matrix(body, environments=(RTX,)))).execute()).set_index("cell_id")
    b1, b4 = (cells.loc[f"dynamic/inputs=b{b}/fp32/{RTX}"] for b in (1, 4))
    assert b1["status"] == b4["status"] == "built"
    profile = json.loads(b4["shape_profile"])
    assert profile["inputs"] == {"x": {"min": [1, 16], "opt": [1, 16], "max": [4, 16]}}
    assert json.loads(b1["shape_profile"]) == profile
    # one engine, built by whichever of the two rows got to it first (they run in parallel)
    assert profile["built_by"] in (f"dynamic/inputs=b{b}/fp32/{RTX}" for b in (1, 4)) and b1["engine_bytes"] == b4["engine_bytes"]
    pinned = cells.loc[f"reshaped/fp32/{RTX}"]
    assert json.loads(pinned["shape_profile"])["inputs"]["shape"] == {"min": [8, 8], "opt": [8, 8], "max": [8, 8],
                                                                       "pinned": True}
    assert key_number(pinned).endswith("≡") and not key_number(b4).endswith("≡")
