"""Shared fixtures: matrix files written on the fly against the repo's real images/ and cases/,
and one cache per test session so the uv virtualenvs are created once (by the code under test)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def docker_client():
    """The real Docker engine, or a skip with the reason. CI sets TRTMATRIX_REQUIRE_DOCKER=1 so
    a missing engine fails there instead of silently skipping the docker tests."""
    from matrix.environments.backend import EnvironmentUnavailable
    from matrix.environments.images import docker_client as connect

    try:
        return connect()
    except EnvironmentUnavailable as exc:
        if os.environ.get("TRTMATRIX_REQUIRE_DOCKER") == "1":
            pytest.fail(f"TRTMATRIX_REQUIRE_DOCKER=1 but {exc}")
        pytest.skip(f"needs a Docker engine (run scripts/setup-docker.sh): {exc}")


def hanging(cache: Path, since: float = 0.0) -> set[str]:
    """Ids of the cells of this cache that are in their injected hang now (their log says so),
    started after `since`: the event a test waits for before it stops a run, on any machine load."""
    found = set()
    for log in cache.glob("results/*/*/cell.log"):
        try:
            if log.stat().st_mtime > since and "injected hang" in log.read_text(errors="replace"):
                found.add(json.loads((log.parent / "cell.json").read_text())["cell_id"])
        except (OSError, ValueError, KeyError):
            continue
    return found


def containers_of_cache(docker_client, cache: Path) -> list[str]:
    """Ids of the trtmatrix worker containers that mount this cache: this test's, never those of
    another test session on the same Docker engine (several people's tests run on one machine)."""
    return [c.id for c in docker_client.containers.list(all=True, filters={"label": "trtmatrix=worker"})
            if any(str(m.get("Source", "")).startswith(str(cache)) for m in c.attrs.get("Mounts", []))]


def wait_for(check, seconds: float = 180.0):
    """`check()`'s value once it is true, or its last value after `seconds`."""
    deadline = time.monotonic() + seconds
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """The session's cache, laid out as the user's cache under an XDG_CACHE_HOME of its own
    (`<xdg>/trtmatrix`), so a test of the default location shares its venvs."""
    folder = tmp_path_factory.mktemp("xdg") / "trtmatrix"
    folder.mkdir()
    return folder


@pytest.fixture(scope="session", autouse=True)
def own_user_cache(cache_dir):
    """Every run of the session, in-process or a subprocess, without a `cache_dir` of its matrix
    file (the examples, the repository's own matrix files) uses the session's cache: the tests never
    write into the cache of the person who runs them."""
    from matrix.store.cache import CACHE_VARIABLE

    before = os.environ.get(CACHE_VARIABLE)
    os.environ[CACHE_VARIABLE] = str(cache_dir)
    yield
    if before is None:
        os.environ.pop(CACHE_VARIABLE)
    else:
        os.environ[CACHE_VARIABLE] = before


SMI = """#!/bin/sh
# A fake nvidia-smi: the queries trtmatrix makes, answered for the GPUs listed below.
GPUS="{gpus}"
case "$*" in
  -q) echo "Driver Version                            : 580.159.04"
      echo "CUDA Version                              : 13.0"
      echo "$GPUS" | while IFS= read -r name; do echo "    Product Name                          : $name"; done ;;
  *name,driver_version,compute_cap*) echo "$GPUS" | while IFS= read -r name; do echo "$name, 580.159.04, 9.0"; done ;;
  *--query-gpu=name*) echo "$GPUS" ;;
  *) exit 1 ;;
esac
"""


# Faked GPUs are only the ones cells run on where there are no real ones.
NO_REAL_GPU = pytest.mark.skipif(
    os.environ.get("CUDA_VISIBLE_DEVICES") is not None or shutil.which("nvidia-smi") is not None,
    reason="a real nvidia-smi is here: the faked GPUs would not be the ones cells run on")


def fake_nvidia_smi(bin_dir: Path, gpus: list[str]) -> dict:
    """The environment variables under which trtmatrix sees these GPUs (all of compute capability
    9.0): no machine here has several GPUs, or any."""
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(SMI.format(gpus="\n".join(gpus)))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


PROFILES = '[profiles.fp32]\nprecision = "fp32"\n[profiles.fp16]\nprecision = "fp16"\n'
# BF16 keeps 8 bits of mantissa: the torch engine's bf16 profile with the tolerance it needs.
BF16 = '[profiles.bf16]\nprecision = "bf16"\n[tolerances.bf16]\natol = 5e-2\nrtol = 5e-2\n'


def tiny_case(model: Path, inputs: Path, profiles=("fp32",)) -> str:
    """The TOML of an ONNX-file case `tiny` (see make_tiny_model)."""
    return f'[cases.tiny]\nonnx = "{model}"\ninputs = "{inputs}"\nprofiles = {json.dumps(list(profiles))}\n'


# The tolerances of every test matrix file (matrix_file; test_user_cache's own).
TOLERANCES = textwrap.dedent("""\
    [tolerances.fp32]
    atol = 1e-4
    rtol = 1e-3

    [tolerances.fp16]
    atol = 1e-2
    rtol = 1e-2
    """)


def matrix_file(directory: Path, cache_dir: Path, body: str, environments=("ort-1.17", "ort-1.32"),
                cases_dir: Path = REPO / "cases", images_dir: Path = REPO / "images", timeout_s: float = 120,
                name: str = "matrix.toml", run: str = "") -> Path:
    """Write a matrix.toml whose [run] table points at the repo (reports under `directory`), with
    `run`'s lines added to it; `body` adds profiles and cases."""
    envs = ", ".join(f'"{e}"' for e in environments)
    head = textwrap.dedent(f"""\
        [run]
        environments = [{envs}]
        cases_dir = "{cases_dir}"
        images_dir = "{images_dir}"
        cache_dir = "{cache_dir}"
        reports_dir = "{directory / 'reports'}"
        timeout_s = {timeout_s}
        """) + run + "\n" + TOLERANCES
    path = directory / name
    path.write_text(head + "\n" + textwrap.dedent(body))
    return path


@pytest.fixture
def write_matrix(tmp_path, cache_dir):
    def write(body: str, **settings) -> Path:
        return matrix_file(tmp_path, cache_dir, body, **settings)

    return write


def make_tiny_model(directory: Path, seed: int = 0) -> tuple[Path, Path]:
    """y = tanh(x @ W + b): small enough for dozens of cells, real enough for every engine."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((16, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="matmul"),
         helper.make_node("Add", ["h", "b"], ["z"], name="add"),
         helper.make_node("Tanh", ["z"], ["y"], name="tanh")],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
    )
    # IR 8 / opset 17: old enough for onnxruntime 1.17.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    model_path, inputs_path = directory / "tiny.onnx", directory / "tiny_inputs.npz"
    onnx.save(model, model_path)
    np.savez(inputs_path, x=rng.standard_normal((4, 16)).astype(np.float32))
    return model_path, inputs_path


@pytest.fixture
def tiny_model(tmp_path) -> tuple[Path, Path]:
    return make_tiny_model(tmp_path)


SMALL = {
    "gemm_mha_fp16": "{ seq_len = 16, hidden = 64, heads = 4 }",
    "mha_transformer_block": "{ tokens = 16, dim = 32, heads = 4, ffn = 64 }",
    "bge_reranker": "{ seq_len = 12, config = { num_hidden_layers = 2, vocab_size = 500, hidden_size = 64, num_attention_heads = 4, intermediate_size = 128 } }",
    "sdpa_attention": "{ tokens = 17, heads = 2 }",
    "explicit_attention": "{ tokens = 17, heads = 2 }",
    "layernorm_block": "{ tokens = 8, dim = 32, depth = 2 }",
}


def small_matrix(profiles='["fp32"]') -> str:
    body = '[profiles.fp32]\nprecision = "fp32"\n[profiles.fp16]\nprecision = "fp16"\n'
    body += '[profiles.fp16-softmax-fp32]\nprecision = "fp16"\nkeep_fp32 = ["Softmax"]\n'
    for name, options in SMALL.items():
        body += f"[cases.{name}]\nprofiles = {profiles}\noptions = {options}\n"
    return body


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, cache_dir):
    """Every seed case, shrunk, prepared for real (torch export + float64 reference), into the
    session's cache: a run of small_matrix's cases there prepares nothing again."""
    home = tmp_path_factory.mktemp("prepare")
    config = matrix_file(home, cache_dir, small_matrix(), environments=("ort-1.32",))
    from matrix.plan import build_plan
    from matrix.prepare import prepare

    plan = build_plan(config)
    done = {}
    for cell in plan.cells:
        done[(cell.case, cell.params)] = prepare(plan.cases[cell.case], cell.params, cell.artifact_key,
                                                 plan.path("cache_dir"))
    return plan, done


def report_details(run_dir: Path, **loads) -> list[dict]:
    """Every cell's details as the report's page loads them: report-details/<n>.js, in order."""
    files = sorted((run_dir / "report-details").glob("[0-9]*.js"), key=lambda p: int(p.stem))  # not timing.js
    cells = []
    for path in files:
        text = path.read_text()
        assert text.startswith(f"trtmatrixDetails({path.stem}, ") and text.endswith(");\n")
        cells += json.loads(text[len(f"trtmatrixDetails({path.stem}, "):-3], **loads)
    return cells


@pytest.fixture(scope="session")
def sweep_run_120(tmp_path_factory, cache_dir):
    """One `trtmatrix run` (onnxruntime 1.20) of the seventh and eighth sweeps' verdict cases (tests/sweep_cases.py)."""
    from sweep_cases import run_120

    return run_120(tmp_path_factory.mktemp("sweep120"), cache_dir)


@pytest.fixture(scope="session")
def sweep_run_132(tmp_path_factory, cache_dir):
    """One `trtmatrix run` (onnxruntime 1.32) of the eighth sweep's refusal and text cases (tests/sweep_cases.py)."""
    from sweep_cases import run_132

    return run_132(tmp_path_factory.mktemp("sweep132"), cache_dir)
