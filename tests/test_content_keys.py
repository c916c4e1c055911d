"""A reused result must be the one a new run would compute. Each test runs a real matrix (real
onnxruntime venvs made by uv, real exports), changes one thing the result depends on, and
`trtmatrix plan` (a dry run) must then show the affected cells `new`, the others `stored`."""

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import PROFILES, REPO, make_tiny_model, matrix_file, tiny_case
from matrix.environments.gpus import parse_smi_report
from matrix.store import list_runs, read_run
from matrix.store.cache import stored_result
from matrix.store.cache import resolutions_folder
from matrix.worker.files import DIGESTS, OUTPUTS, RESULT, file_digest, save_arrays


def cli(*args, cwd=REPO, env=None):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250", **(env or {})})


def run(config, **kwargs):
    done = cli("run", "-c", str(config), **kwargs)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: a regression against the run before
    return done


def last_run(directory: Path):
    return read_run(list_runs(directory / "reports")[-1]).set_index("cell_id")


def states(config, **kwargs) -> dict[str, str]:
    """{cell id: stored | new | unknown} as `trtmatrix plan` says."""
    plan = cli("plan", "-c", str(config), **kwargs)
    assert plan.returncode == 0, plan.stderr
    return dict(line.split("\t")[::2] for line in plan.stdout.splitlines())


def images(folder: Path, **definitions: str) -> Path:
    """An images/ folder holding the given definitions (name=TOML text)."""
    folder.mkdir()
    for name, text in definitions.items():
        (folder / f"{name}.toml").write_text(textwrap.dedent(text))
    return folder


ORT_VENV = 'engine = "onnxruntime"\nversion = "1.32.0"\nbackend = "venv"\n'


# --- 1. the host's onnxruntime, which makes the FP16 copy ---------------------------------------

def test_fp16_cells_follow_the_host_converter_version(tmp_path, cache_dir):
    model, inputs = make_tiny_model(tmp_path, seed=11)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs, ("fp32", "fp16")),
                         environments=("ort-1.32",))
    first = run(config)
    assert states(config) == {"tiny/fp32/ort-1.32": "stored", "tiny/fp16/ort-1.32": "stored"}
    assert "2 cells: 2 pass\n" in first.stderr  # nothing reused: nothing said of it
    assert "2 cells: 2 pass (2 reused from earlier runs, none run now)" in run(config).stderr

    # Another onnxruntime on the host, as installed-package metadata says (first on sys.path wins).
    site = tmp_path / "site" / "onnxruntime-99.0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime\nVersion: 99.0\n")
    upgraded = {"PYTHONPATH": str(site.parent)}
    assert states(config, env=upgraded) == {"tiny/fp32/ort-1.32": "stored", "tiny/fp16/ort-1.32": "new"}

    # A run makes a new FP16 copy for it instead of reusing the one the other converter made.
    assert "(1 reused from earlier runs, 1 run now)" in run(config, env=upgraded).stderr
    cells = last_run(tmp_path)
    assert list(cells["reused"]) == [True, False]
    artifacts = cache_dir / "artifacts" / cells.loc["tiny/fp16/ort-1.32", "artifact"]
    assert len(list(artifacts.glob("model.fp16-*.onnx"))) == 2


# --- 2. trtmatrix's own prepare code --------------------------------------------------------------

def test_a_change_to_prepare_code_re_prepares_every_case(tmp_path, cache_dir):
    """A copy of the package runs and plans (so nobody else's edit of the tree can interfere);
    then one of its prepare files changes."""
    source = tmp_path / "src"
    shutil.copytree(REPO / "matrix", source / "matrix", ignore=shutil.ignore_patterns("__pycache__"))
    model, inputs = make_tiny_model(tmp_path, seed=12)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs, ("fp32", "fp16")),
                         environments=("ort-1.32",))
    run(config, cwd=source)
    assert set(states(config, cwd=source).values()) == {"stored"}

    with (source / "matrix" / "prepare" / "graph_checks.py").open("a") as fh:
        fh.write("\n# a change to what prepare does\n")
    assert set(states(config, cwd=source).values()) == {"new"}


# --- 3. an ONNX file's external data --------------------------------------------------------------

def test_external_data_of_an_onnx_file_is_part_of_the_key(tmp_path, cache_dir):
    tiny, inputs = make_tiny_model(tmp_path, seed=13)
    model = tmp_path / "external.onnx"
    onnx.save(onnx.load(str(tiny)), str(model), save_as_external_data=True, all_tensors_to_one_file=True,
              location="external.weights", size_threshold=0)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs), environments=("ort-1.32",))
    run(config)
    assert states(config) == {"tiny/fp32/ort-1.32": "stored"}

    weights = tmp_path / "external.weights"
    before = model.read_bytes()
    data = bytearray(weights.read_bytes())
    data[:4] = np.float32(0.5).tobytes()  # one weight changes; the .onnx file stays byte for byte
    weights.write_bytes(bytes(data))
    assert model.read_bytes() == before
    assert states(config) == {"tiny/fp32/ort-1.32": "new"}


# --- 4. the files a case's options name -------------------------------------------------------------

CHECKPOINT_CASE = '''
from pathlib import Path

import numpy as np
import torch
from matrix.case import case


@case()
def from_checkpoint(checkpoint: str):
    """A linear layer whose weights come from a checkpoint folder."""
    linear = torch.nn.Linear(4, 3, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(np.load(Path(checkpoint) / "weight.npy")))
    return linear, {"x": torch.randn(2, 4)}
'''


def test_files_under_a_checkpoint_option_are_part_of_the_key(tmp_path, cache_dir):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "checkpoint_case.py").write_text(CHECKPOINT_CASE)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    weight = checkpoint / "weight.npy"
    np.save(weight, np.arange(12, dtype=np.float32).reshape(3, 4))
    config = matrix_file(tmp_path, cache_dir, PROFILES + f'[cases.from_checkpoint]\nprofiles = ["fp32"]\n'
                         f'options = {{ checkpoint = "{checkpoint}" }}\n', environments=("ort-1.32",),
                         cases_dir=cases)
    run(config)
    assert states(config) == {"from_checkpoint/fp32/ort-1.32": "stored"}

    os.utime(weight, ns=(0, 0))  # the same content, touched: nothing to re-run
    assert states(config) == {"from_checkpoint/fp32/ort-1.32": "stored"}
    np.save(weight, np.ones((3, 4), dtype=np.float32))  # new weights in the checkpoint
    assert states(config) == {"from_checkpoint/fp32/ort-1.32": "new"}


# --- 5. the GPU, driver and CUDA version of GPU environments ---------------------------------------

# The head of `nvidia-smi -q` on an H100 host with driver 580 (the lines that matter, as printed).
SMI_REPORT = """
==============NVSMI LOG==============

Timestamp                                              : Mon Nov 23 06:24:50 2026
Driver Version                                         : 580.159.04
CUDA Version                                           : 13.0

Attached GPUs                                          : 1
GPU 00000000:00:06.0
    Product Name                                       : NVIDIA H100 80GB HBM3
    Product Brand                                      : NVIDIA
    Product Architecture                               : Hopper
"""

# Answers what trtmatrix asks nvidia-smi (-q; --query-gpu=name; --query-gpu=name,driver_version)
# from the report beside it: this host has no GPU.
FAKE_SMI = """#!/bin/sh
report="$(dirname "$0")/report.txt"
[ "$1" = "-q" ] && exec cat "$report"
name=$(sed -n 's/^ *Product Name *: //p' "$report")
driver=$(sed -n 's/^Driver Version *: //p' "$report")
[ "$1" = "--query-gpu=name" ] && echo "$name" || echo "$name, $driver"
"""


def test_nvidia_smi_report_gives_gpus_driver_and_cuda():
    assert parse_smi_report(SMI_REPORT) == {"gpus": ["NVIDIA H100 80GB HBM3"], "driver": "580.159.04",
                                            "cuda": "13.0"}
    assert parse_smi_report("") == {"gpus": []}


def test_gpu_environments_follow_the_hosts_gpu_driver(tmp_path, cache_dir):
    """The GPU is a stand-in (an nvidia-smi script answering with a real report); the cells are real
    onnxruntime cells of a venv environment marked `gpu = true`."""
    smi = tmp_path / "bin"
    smi.mkdir()
    (smi / "nvidia-smi").write_text(FAKE_SMI)
    (smi / "nvidia-smi").chmod(0o755)
    (smi / "report.txt").write_text(SMI_REPORT)
    env = {"PATH": f"{smi}{os.pathsep}{os.environ['PATH']}"}
    folder = images(tmp_path / "images", **{
        "ort-gpu": ORT_VENV + 'gpu = true\nrequirements = ["onnxruntime==1.32.0", "numpy==2.4.6"]\n',
        "ort-cpu": ORT_VENV + 'requirements = ["onnxruntime==1.32.0", "numpy==2.4.6"]\n'})
    model, inputs = make_tiny_model(tmp_path, seed=15)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs),
                         environments=("ort-gpu", "ort-cpu"), images_dir=folder)
    run(config, env=env)
    assert states(config, env=env) == {"tiny/fp32/ort-gpu": "stored", "tiny/fp32/ort-cpu": "stored"}

    (smi / "report.txt").write_text(SMI_REPORT.replace("580.159.04", "580.200.01"))  # a driver update
    assert states(config, env=env) == {"tiny/fp32/ort-gpu": "new", "tiny/fp32/ort-cpu": "stored"}


# --- 6. a venv's resolved dependencies ---------------------------------------------------------------

def make_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal pure-Python wheel, so a test can publish a new version of a dependency locally."""
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {f"{module}/__init__.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).decode().rstrip("=")

    record = "".join(f"{path},sha256={digest(text)},{len(text.encode())}\n" for path, text in files.items())
    record += f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{module}-{version}-py3-none-any.whl", "w") as wheel:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            wheel.writestr(path, text)


def test_venv_follows_its_resolved_dependencies(tmp_path, cache_dir):
    """A pinned requirement with an unpinned dependency, both from a local package folder: when the
    dependency gets a new version the venv's cells are new; without a network uv resolves from its
    cache; when nothing resolves they are unknown, never silently stored."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "trtmatrix-testdep-top", "1.0", requires=("trtmatrix-testdep-leaf",))
    make_wheel(wheels, "trtmatrix-testdep-leaf", "1.0")
    env = {"UV_FIND_LINKS": str(wheels)}
    folder = images(tmp_path / "images", **{"ort-deps": ORT_VENV + 'requirements = ["onnxruntime==1.32.0", '
                                                                    '"numpy==2.4.6", "trtmatrix-testdep-top==1.0"]\n'})
    model, inputs = make_tiny_model(tmp_path, seed=16)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs), environments=("ort-deps",),
                         images_dir=folder)
    run(config, env=env)
    assert states(config, env=env) == {"tiny/fp32/ort-deps": "stored"}
    offline = {**env, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}  # a closed port
    assert states(config, env=offline) == {"tiny/fp32/ort-deps": "stored"}  # resolved from uv's cache

    make_wheel(wheels, "trtmatrix-testdep-leaf", "2.0")  # the unpinned dependency moves
    shutil.rmtree(resolutions_folder(cache_dir))  # a run keeps its resolutions ten minutes (issue 44): past them
    assert states(config, env=env) == {"tiny/fp32/ort-deps": "new"}
    lock = next((cache_dir / "venvs").glob("ort-deps-*/requirements.lock")).read_text()
    assert "trtmatrix-testdep-leaf==1.0" in lock  # what the venv of the stored result holds

    for wheel in wheels.iterdir():  # nothing resolves any more (no index has these packages)
        wheel.unlink()
    assert states(config, env=env) == {"tiny/fp32/ort-deps": "unknown"}


def test_a_host_interpreters_kept_facts_follow_its_installation(tmp_path, cache_dir):
    """A host environment's engine is imported once to learn its version (torch: seconds on a GPU
    host); the answer is kept under the installation it checked. An unchanged interpreter reuses it
    and its stored cells; another engine version installed into the same interpreter is a new
    installation: its cells run again, reporting the new version."""
    from uv import find_uv_bin

    venv = tmp_path / "venv"
    python = venv / "bin" / "python"

    def install(*requirements):
        subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--python", str(python), *requirements],
                       check=True, capture_output=True)

    subprocess.run([find_uv_bin(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    install("onnxruntime==1.32.0", "numpy==2.4.6")
    folder = images(tmp_path / "images", **{"ort-here": f'engine = "onnxruntime"\nbackend = "host"\npython = "{python}"\n'})
    model, inputs = make_tiny_model(tmp_path, seed=18)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs), environments=("ort-here",),
                         images_dir=folder)
    kept = cache_dir / "interpreters"
    before = set(kept.glob("*.json")) if kept.is_dir() else set()
    run(config)
    first = last_run(tmp_path).loc["tiny/fp32/ort-here"]
    assert first["status"] == "pass" and first["engine_version"] == "1.32.0"
    checked = set(kept.glob("*.json")) - before
    assert [json.loads(p.read_text())["engine_version"] for p in checked] == ["1.32.0"]

    run(config)
    assert bool(last_run(tmp_path).loc["tiny/fp32/ort-here", "reused"])
    assert set(kept.glob("*.json")) - before == checked  # nothing checked again

    install("onnxruntime==1.20.1", "numpy==1.26.4")
    run(config)
    again = last_run(tmp_path).loc["tiny/fp32/ort-here"]
    assert not again["reused"] and again["status"] == "pass" and again["engine_version"] == "1.20.1"
    assert sorted(json.loads(p.read_text())["engine_version"] for p in set(kept.glob("*.json")) - before) \
        == ["1.20.1", "1.32.0"]


def test_a_host_interpreter_runs_its_cells_with_the_engine_its_user_gives_it(tmp_path, cache_dir):
    """A host environment is the interpreter as its user runs it: an engine it finds only through
    PYTHONPATH (on the GPU host lent to us nothing can be pip-installed; wheels are unpacked into a
    folder) is the one its cells run, as the import check found it — not a check that passes and
    cells that cannot import the engine."""
    from uv import find_uv_bin

    venv, site = tmp_path / "venv", tmp_path / "site"
    subprocess.run([find_uv_bin(), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    # the versions trtmatrix itself runs with: its own process finds the same files there
    subprocess.run([find_uv_bin(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), "--target",
                    str(site), "onnxruntime==1.32.0", "numpy==2.4.6"], check=True, capture_output=True)
    folder = images(tmp_path / "images", **{"ort-path": f'engine = "onnxruntime"\nbackend = "host"\n'
                                                        f'python = "{venv / "bin" / "python"}"\n'})
    model, inputs = make_tiny_model(tmp_path, seed=19)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs), environments=("ort-path",),
                         images_dir=folder)
    run(config, env={"PYTHONPATH": str(site)})
    cell = last_run(tmp_path).loc["tiny/fp32/ort-path"]
    assert (cell["status"], cell["engine_version"]) == ("pass", "1.32.0"), cell["error"]


# --- 7. infrastructure errors are retried, engine results reused -------------------------------

def test_an_environment_whose_engine_does_not_import_is_retried(tmp_path, cache_dir):
    """A broken environment (here: onnxruntime missing from the venv) errors in every cell; the
    next run must try again, not replay the error (the venv may have been repaired since)."""
    folder = images(tmp_path / "images", **{"ort-broken": ORT_VENV + 'requirements = ["numpy==2.4.6"]\n'})
    model, inputs = make_tiny_model(tmp_path, seed=17)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs), environments=("ort-broken",),
                         images_dir=folder)
    run(config)
    assert "No module named 'onnxruntime'" in last_run(tmp_path).loc["tiny/fp32/ort-broken", "error"]
    assert states(config) == {"tiny/fp32/ort-broken": "new"}


ENGINE = {"engine": "onnxruntime", "engine_version": "1.32.0", "python_version": "3.11.7"}


@pytest.mark.parametrize("record, reused", [
    ({**ENGINE, "status": "ok", "build_s": 0.1}, True),                                     # outputs to judge
    ({**ENGINE, "status": "error", "error": "RuntimeError: injected failure"}, True),       # the engine raised
    ({**ENGINE, "status": "skipped", "error": "no CPU kernel for this model in fp16"}, True),
    ({"status": "error", "error": "worker exited with status 1 without a result"}, False),  # the supervisor's
    ({"status": "error", "error": "ModuleNotFoundError: No module named 'onnxruntime'"}, False),  # no engine
    ({"status": "crash", "error": "killed by SIGSEGV"}, False),
    ({"status": "timeout", "error": "no result after 900s; killed"}, False),
])
def test_only_what_the_engine_produced_for_the_cell_is_reused(tmp_path, record, reused):
    if record["status"] == "ok":  # outputs to judge, and their digest as the worker writes it (issue 41)
        save_arrays(tmp_path / OUTPUTS, {"y": np.zeros(3, np.float32)})
        record = {**record, DIGESTS: {OUTPUTS: file_digest(tmp_path / OUTPUTS)}}
    (tmp_path / RESULT).write_text(json.dumps({"cell_id": "tiny/fp32/ort-1.32", "error": None, **record}))
    assert (stored_result(tmp_path) is not None) is reused


def test_a_profile_description_is_words_not_numbers(tmp_path, cache_dir):
    """Rewording a profile's description keeps its cells' keys; changing what it does does not."""
    from matrix.plan import build_plan

    model, inputs = make_tiny_model(tmp_path)
    keys = []
    for profile in ('precision = "fp16"\ndescription = "FP16"', 'precision = "fp16"\ndescription = "FP16, reworded"',
                    'precision = "fp16"\noptimization = "off"\ndescription = "FP16"'):
        body = f"[profiles.half]\n{profile}\n" + tiny_case(model, inputs, ("half",))
        config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.32",), name=f"m{len(keys)}.toml")
        keys.append(build_plan(config).cells[0].content_key)
    assert keys[0] == keys[1] != keys[2]


def test_two_cases_of_identical_files_do_not_share_a_result_folder(tmp_path):
    """Identical ONNX files in two cases were one content key: two parts of one environment (Ray
    nodes) removed each other's results in the one folder ("worker exited 0 before this cell")."""
    from conftest import PROFILES, make_tiny_model, matrix_file, tiny_case
    from matrix.plan import build_plan

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    body = PROFILES + tiny_case(*make_tiny_model(tmp_path / "a")) + \
        tiny_case(*make_tiny_model(tmp_path / "b")).replace("[cases.tiny]", "[cases.other]")
    cells = build_plan(matrix_file(tmp_path, tmp_path / "cache", body, environments=("ort-1.32",))).cells
    assert len(cells) == 2 and cells[0].content_key != cells[1].content_key
