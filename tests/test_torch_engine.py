"""The torch engine through a host environment: the seed modules themselves (not their ONNX
exports) on the CPU here; on CUDA where a GPU is (the `gpu` tests, run on an H100 host)."""

import json
import os
import platform
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import BF16, REPO, make_tiny_model, matrix_file
from matrix.prepare.forward_inputs import bound_by_name, module_and_inputs
from matrix.prepare.torch_module import export_program
from matrix.store import list_runs, read_run
from matrix.store.cache import result_dir
from matrix.worker.files import RESULT

# fp32, bf16 and tf32 with their tolerances: what both matrices below start from.
PRECISIONS = BF16 + """\
[profiles.fp32]
precision = "fp32"
[profiles.tf32]
precision = "tf32"
[tolerances.tf32]
atol = 5e-3
rtol = 5e-3
"""

CPU = PRECISIONS + """\
[profiles.flash]
precision = "fp16"
sdpa_backend = "flash"
[profiles.math]
precision = "fp32"
sdpa_backend = "math"
[profiles.noopt]
precision = "fp32"
optimization = "off"
[cases.sdpa_attention]
profiles = ["fp32", "bf16", "tf32", "flash", "math", "noopt"]
"""


def cli(*args):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, cache_dir):
    home = tmp_path_factory.mktemp("torch")
    config = matrix_file(home, cache_dir, CPU, environments=("torch-host-cpu",))
    done = cli("run", "-c", str(config))
    assert done.returncode == 0, done.stderr
    return config, read_run(list_runs(home / "reports")[-1]).set_index("profile")


def test_the_module_runs_on_the_cpu_in_fp32_and_bf16_against_float64(cpu_run):
    _, cells = cpu_run
    fp32, bf16, math = cells.loc["fp32"], cells.loc["bf16"], cells.loc["math"]
    assert (fp32["status"], bf16["status"], math["status"]) == ("pass", "pass", "pass"), cells["error"].to_dict()
    # BF16 keeps 8 bits of mantissa, FP32 24: its error against float64 is orders of magnitude larger.
    assert bf16["max_abs"] > 100 * fp32["max_abs"] > 0
    assert bf16["max_abs"] < 5e-2 and fp32["max_abs"] < 1e-5
    # The environment is the interpreter running trtmatrix, and says so.
    assert fp32["engine_version"] == torch.__version__ and fp32["python_version"] == platform.python_version()
    assert fp32["device"] == "cpu" and fp32["engine"] == "torch" and fp32["env_version"] is None


def test_gpu_only_and_onnx_only_settings_are_skipped_with_the_reason(cpu_run):
    _, cells = cpu_run
    assert cells.loc["tf32", "status"] == "skipped" and "TF32 is a CUDA mode" in cells.loc["tf32", "error"]
    assert cells.loc["flash", "status"] == "skipped" and "flash SDPA kernel runs on CUDA only" in cells.loc["flash", "error"]
    assert cells.loc["noopt", "status"] == "skipped" and 'no optimization = "off"' in cells.loc["noopt", "error"]


def test_a_module_made_by_another_torch_is_an_error_that_says_so(cpu_run, cache_dir):
    config, cells = cpu_run
    meta_path = cache_dir / "artifacts" / cells.loc["fp32", "artifact"] / "program.json"
    meta = json.loads(meta_path.read_text())
    try:
        meta_path.write_text(json.dumps({**meta, "torch": "2.0.0"}))
        # the cell runs again on these artifacts (--no-reuse would prepare the case file's case again)
        result_dir = cache_dir / "results" / "torch-host-cpu" / str(cells.loc["fp32", "content_key"])[:24]
        shutil.rmtree(result_dir)
        assert cli("run", "-c", str(config), "--cell", "sdpa_attention/batch=1/fp32/torch-host-cpu").returncode == 1
        cell = read_run(list_runs(config.parent / "reports")[-1]).set_index("profile").loc["fp32"]
        assert cell["status"] == "error"
        assert f"made by torch 2.0.0 and this environment has torch {torch.__version__}" in cell["error"]
    finally:
        meta_path.write_text(json.dumps(meta))


OWN_CASES = """\
import torch
from torch import nn

from matrix.case import Export, case


class SignGate(nn.Module):
    \"\"\"Python control flow on a value: torch.export refuses it, users run it every day.\"\"\"

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        return y * 2 if float(y.sum()) > 0 else y * 3


class Unpicklable(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear, self.act = nn.Linear(8, 8), lambda t: t * 2

    def forward(self, x):
        return self.act(self.linear(x))


@case(export=Export(opset=17))
def sign_gate():
    return SignGate(), {"x": torch.randn(4, 8)}


@case(export=Export(opset=17))
def unpicklable():
    return Unpicklable(), {"x": torch.randn(4, 8)}


class Sub(nn.Module):
    def forward(self, a, b):
        return a - 2 * b


@case(export=Export(opset=17))
def swapped():
    return Sub(), {"b": torch.ones(3), "a": torch.zeros(3)}
"""


def test_the_cell_runs_the_module_itself_where_no_program_can_be_traced(tmp_path, cache_dir):
    """Issue 43, build 1: a torch cell runs the module as its users do, not a program traced at
    prepare time (one traced on the CPU failed on CUDA where the module runs). A module torch.export
    refuses (control flow on a value) runs and passes; its class, defined in the case file, is
    imported by path in the worker. A module that cannot be saved for the engine is an error that
    says why, and its ONNX cells still run. Issue 41, sweep 4 #20: an inputs dict in another order
    than forward()'s parameters ({"b": ones, "a": zeros} for forward(a, b)) was bound in the dict's
    order, forward(a=ones, b=zeros) under the names b, a: its names now bind (reference a - 2b = -2)."""
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "own.py").write_text(OWN_CASES)
    body = ('[profiles.fp32]\nprecision = "fp32"\n[cases.sign_gate]\nprofiles = ["fp32"]\n[cases.unpicklable]\nprofiles = ["fp32"]\n'
            '[cases.swapped]\nprofiles = ["fp32"]\n')
    config = matrix_file(tmp_path, cache_dir, body, environments=("torch-host-cpu", "ort-host"), cases_dir=cases,
                         images_dir=_images_with_ort_host(tmp_path))
    done = cli("run", "-c", str(config))
    assert done.returncode == 0, done.stderr  # an error cell is a finding, not a failed run
    cells = read_run(list_runs(tmp_path / "reports")[-1]).set_index(["case", "env"])
    gate = cells.loc[("sign_gate", "torch-host-cpu")]
    program = json.loads((cache_dir / "artifacts" / gate["artifact"] / "program.json").read_text())
    assert not list((cache_dir / "artifacts" / gate["artifact"]).glob("program-*.pt2"))  # traced for repro alone
    assert gate["status"] == "pass" and gate["max_abs"] < 1e-5, gate["error"]
    log = (list_runs(tmp_path / "reports")[-1] / "cells" / f"{gate['content_key'][:24]}.log").read_text()
    assert "loaded the fp32 module onto cpu" in log
    bad = cells.loc[("unpicklable", "torch-host-cpu")]
    assert bad["status"] == "error" and "could not be saved for the torch engine" in bad["error"], bad["error"]
    assert "pickle" in bad["error"]
    assert cells.loc[("unpicklable", "ort-host"), "status"] == "pass"
    swapped = cells.loc["swapped"]
    assert list(swapped["status"]) == ["pass", "pass"], list(swapped["error"])
    artifacts = cache_dir / "artifacts" / swapped["artifact"].iloc[0]
    with np.load(artifacts / "inputs.npz") as inputs, np.load(artifacts / "reference.npz") as reference:
        assert list(inputs) == ["a", "b"] and list(inputs["a"]) == [0, 0, 0]
        assert [list(r) for r in reference.values()] == [[-2, -2, -2]]

    class Sub(torch.nn.Module):
        def forward(self, a, b):
            return a - 2 * b

    with pytest.raises(ValueError, match=r"forward\(a, b\) in the dict's order: input 'b' would be forward\(\)'s 'a'"):
        bound_by_name(Sub(), {"b": 1, "c": 2})  # a parameter's name that would land on another
    # issue 41, sweep 18 L19: a numpy input was trtmatrix's own AttributeError
    with pytest.raises(ValueError, match=r"returned input 'a' as a ndarray, not a torch.Tensor"):
        module_and_inputs((Sub(), {"a": np.zeros(2), "b": torch.zeros(2)}))


def test_an_onnx_file_case_has_no_module_for_the_torch_engine(tmp_path, cache_dir):
    model, inputs = make_tiny_model(tmp_path)
    body = f'[profiles.fp32]\nprecision = "fp32"\n[cases.tiny]\nonnx = "{model}"\ninputs = "{inputs}"\nprofiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("torch-host-cpu", "ort-host"),
                         images_dir=_images_with_ort_host(tmp_path))
    assert cli("run", "-c", str(config)).returncode == 0
    cells = read_run(list_runs(tmp_path / "reports")[-1]).set_index("env")
    assert cells.loc["torch-host-cpu", "status"] == "skipped" and "no PyTorch module" in cells.loc["torch-host-cpu", "error"]
    # onnxruntime through a host environment: the orchestrator's own onnxruntime runs it.
    import onnxruntime

    assert cells.loc["ort-host", "status"] == "pass" and cells.loc["ort-host", "engine_version"] == onnxruntime.__version__


def _images_with_ort_host(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for name in ("torch-host-cpu.toml",):
        (images / name).write_text((REPO / "images" / name).read_text())
    (images / "ort-host.toml").write_text('engine = "onnxruntime"\nbackend = "host"\n')
    return images


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU: the CUDA column runs (test below)")
def test_without_a_gpu_the_cuda_environment_is_skipped_with_the_reason(tmp_path, cache_dir):
    body = '[profiles.fp32]\nprecision = "fp32"\n[cases.sdpa_attention]\nprofiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("torch-host-cuda",))
    assert cli("run", "-c", str(config)).returncode == 0
    cell = read_run(list_runs(tmp_path / "reports")[-1]).iloc[0]
    assert cell["status"] == "skipped" and "no NVIDIA GPU on this host" in cell["error"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU with CUDA (PyTorch sees none here)")
def test_on_a_gpu_every_cell_has_a_status_and_the_gpu_facts(tmp_path, cache_dir):
    shipped = (REPO / "matrices" / "gpu-torch.toml").read_text()
    config = tmp_path / "gpu-torch.toml"  # the shipped matrix, its [run] table pointed here
    config.write_text(f"""[run]
environments = ["torch-host-cuda"]
cases_dir = "{REPO / 'cases'}"
images_dir = "{REPO / 'images'}"
cache_dir = "{cache_dir}"
reports_dir = "{tmp_path / 'reports'}"
timeout_s = 600

""" + shipped[shipped.index("[profiles.fp32]"):])
    done = cli("run", "-c", str(config), "--case", "sdpa_attention", "--case", "layernorm_block")
    assert done.returncode == 0, done.stderr
    cells = read_run(list_runs(tmp_path / "reports")[-1])
    gpu = torch.cuda.get_device_name(0)
    ran = cells[cells["status"] != "skipped"]
    assert len(ran) and set(ran["device"]) == {"cuda"} and set(ran["gpu"]) == {gpu}
    for column in ("driver_version", "cuda_version", "compute_capability", "cudnn_version"):
        assert ran[column].notna().all(), column
    major, minor = torch.cuda.get_device_capability(0)
    assert set(ran["compute_capability"]) == {f"{major}.{minor}"} and set(ran["cuda_version"]) == {torch.version.cuda}
    # GPU-model routing, both ways: sdpa_attention runs on H100s only, layernorm_block on A100s only.
    by_case = {case: group for case, group in cells.groupby("case")}
    h100, a100 = "H100" in gpu, "A100" in gpu
    assert (by_case["sdpa_attention"]["status"] == "skipped").all() == (not h100)
    routed = by_case["layernorm_block"]
    assert (routed["status"] == "skipped").all() == (not a100)
    if not a100:
        assert routed["error"].str.contains("['*A100*']; this environment has " + gpu, regex=False).all()


WARM = PRECISIONS + """\
[profiles.compiled]
precision = "fp32"
compile = true
[profiles.crash]
precision = "fp32"
inject = "crash"
[cases.sdpa_attention]
profiles = ["compiled", "tf32", "fp32", "bf16", "crash"]
params = { batch = [1, 2] }
"""

CUDA_HERE = torch.cuda.is_available()


@pytest.mark.parametrize("env", ["torch-host-cpu", pytest.param("torch-host-cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not CUDA_HERE, reason="needs an NVIDIA GPU with CUDA (PyTorch sees none here)")])])
def test_a_warm_worker_runs_cells_as_separate_processes_do_and_a_crash_leaves_the_next_cells_alone(env, tmp_path, cache_dir):
    """The warm worker of GPU cells (one process: CUDA and modules loaded once; forced on the CPU):
    every cell starts from the same torch state (TF32 flags, torch.compile's caches: a compiled or
    TF32 cell leaves nothing behind), each module is loaded once per worker and dtype, a crash ends that
    worker and the next cell gets a fresh one; the numbers are those of a process per cell."""
    results = {}
    for mode, start in (("fork", "fork"), ("warm", "warm" if env == "torch-host-cpu" else None)):
        home = tmp_path / mode
        home.mkdir()
        config = matrix_file(home, cache_dir, WARM, environments=(env,))
        forced = {"TRTMATRIX_CELL_START": start} if start else {}
        done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--no-reuse"], cwd=REPO,
                              capture_output=True, text=True, env={**os.environ, "COLUMNS": "250", **forced})
        assert done.returncode == 0, done.stderr
        run_dir = list_runs(home / "reports")[-1]
        frame = read_run(run_dir).set_index("cell_id")
        results[mode] = (run_dir, frame)
        passed = frame[frame["status"] == "pass"]
        # how each cell's process started, as its result says (the next run writes the same folders)
        assert {json.loads((result_dir(cache_dir, env, key) / RESULT).read_text()).get("cell_start")
                for key in passed["content_key"]} == {mode}  # warm: on a GPU without being asked
    (run_dir, warm), (_, fork) = results["warm"], results["fork"]
    assert (warm["status"] == fork["status"]).all() and "pass" in set(warm["status"])
    assert list(warm.index[warm["status"] == "crash"]) == [f"sdpa_attention/batch={b}/crash/{env}" for b in (1, 2)]
    judged = warm["status"] == "pass"
    # The same numbers as a process per cell (bit for bit on the CPU; a GPU's kernels may choose otherwise).
    assert np.allclose(warm.loc[judged, "max_abs"], fork.loc[judged, "max_abs"], rtol=1e-6 if CUDA_HERE else 0, atol=0)
    ran = warm["engine_version"].notna() & (warm["status"] != "crash")
    logs = {cell: (run_dir / "cells" / f"{key[:24]}.log").read_text() for cell, key in warm.loc[ran, "content_key"].items()}
    states = {cell: next(line for line in log.splitlines() if "torch state at start: " in line).split(": ", 1)[1]
              for cell, log in logs.items() if "torch state at start" in log}
    assert len(states) >= judged.sum() and len(set(states.values())) == 1, states  # nothing leaked from a cell to the next
    # Two workers (a crash ends each): the fp32 module of each batch is loaded by its compiled cell and
    # reused by the cells after it; in a process per cell, every cell loads its own.
    said = [line for log in logs.values() for line in log.splitlines() if "the fp32 module" in line]
    assert sum("loaded the fp32 module" in line for line in said) == 2
    assert sum("by an earlier cell of this worker" in line for line in said) == len(said) - 2 >= 2


USERS_CASES = """\
import os
import pathlib

import numpy as np
import torch
from torch import nn
from matrix.case import Export, case

from _helper import OFFSET  # a module beside the case file, as docs/cases.md shows it

HERE = pathlib.Path(__file__).parent
CONFIG = {"scale": 1.0}


class InPlace(nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


class Scaled(nn.Module):
    eps = 0.0

    def forward(self, x):
        return x * CONFIG["scale"] * float(os.environ["USERS_SCALE"]) + type(self).eps + OFFSET


class ReadsAtCall(nn.Module):
    def forward(self, x):
        return x * float(np.load(HERE / "w.npy")[0])


class Tripled(nn.Module):
    def forward(self, i):
        return i * 3 + 1


class Tiny(nn.Module):
    def forward(self, x):
        return x * 1e-30 * 1e-20 * 1e30 * 1e20


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x):
        self.calls += 1
        with torch.no_grad():
            self.w.add_(1)  # a parameter the module changes itself
        return x * self.calls * self.w


class Determinant(nn.Module):
    def forward(self, x):
        return torch.linalg.det(x)


class Loud(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.full((4, 4), 0.25))

    def forward(self, x):
        return (x * 300) @ self.w * 300 / 1000


class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("c", torch.tensor([1.0 + 2 ** -30], dtype=torch.float64))

    def forward(self, x):
        return (x.double() * self.c - x.double()) * 2 ** 30


@case(export=Export(opset=17))
def in_place():
    return InPlace(), {"x": torch.tensor([1.0, 2.0, 3.0])}


@case(export=Export(opset=17))
def configured():
    CONFIG["scale"] = 3.0
    Scaled.eps = 10.0
    os.environ["USERS_SCALE"] = "0.5"
    return Scaled(), {"x": torch.tensor([1.0, 2.0])}


@case(export=Export(opset=17))
def reads_at_call():
    return ReadsAtCall(), {"x": torch.tensor([1.0, 2.0])}


@case(export=Export(opset=17))
def integers():
    return Tripled(), {"i": torch.tensor([1, 2, 3])}


@case(export=Export(opset=17))
def tiny():
    return Tiny(), {"x": torch.tensor([1.0, 2.0])}


@case(export=Export(opset=17))
def wide():
    return Wide(), {"x": torch.tensor([1.0, 3.0])}


@case(export=Export(opset=17))
def counting():
    return Counting(), {"x": torch.tensor([1.0, 2.0])}


@case(export=Export(opset=17))
def determinant():
    return Determinant(), {"x": torch.eye(3) * 2}


@case(export=Export(opset=17))
def loud():
    return Loud(), {"x": torch.ones(2, 4)}


class FloorSteps(nn.Module):
    def forward(self, x):
        acc, outs = torch.zeros_like(x), []
        for _ in range(30):
            acc = acc + 0.1
            outs.append(torch.floor(acc / 0.1) * 1e-7)
        return torch.stack(outs)


@case(export=Export(opset=17))
def floor_steps():
    return FloorSteps(), {"x": torch.zeros(1)}
"""


def test_a_torch_cell_runs_what_the_user_built_as_the_user_calls_it(tmp_path, cache_dir):
    """Issue 41, sweep 18: L1, a module that doubles its input in place got the same tensor in all
    11 inferences (FAIL 6.1e3 "drift"); L7, what the build set in the case file (a config global, a
    class attribute) was lost where the worker imports the file afresh (FAIL 4, 10); L12, a file the
    module's forward reads was no input of the case: changed, the stale reference was reused; L3, an
    FP16 cell of a module with nothing floating passed; L2, x · 1e-30 · 1e-20 · 1e30 · 1e20 (0 in
    float32, x in float64) failed every engine. L6, L10: `explain` and `precision` of a torch cell
    said the case had no module, or raised a TypeError. L15: a float64 buffer (1 + 2**-30) the user made
    was made float32 (1.0) at prepare, so the reference was another model's, and the FP16 cell kept it
    float64 where `module.half()` does not. L21: a module counting its calls in a buffer failed by its
    eleventh call's drift, and repro called that unwritten memory (sweep 19 M8: a parameter, too; M7: an
    environment variable the build set was lost too; M9: `from _helper import …` beside it did not import;
    M11: a flip of 1e-7 between PyTorch's and its export's float64, within tolerance, was never judged). L14: PyTorch's "not implemented for
    'Half'" was an `error`. L11: repro filed a PyTorch bug for a module whose own values pass 65504."""
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "users.py").write_text(USERS_CASES)
    (cases / "_helper.py").write_text("OFFSET = 100.0\n")
    np.save(cases / "w.npy", np.array([2.0], np.float32))
    body = ('[profiles.fp32]\nprecision = "fp32"\n[profiles.fp16]\nprecision = "fp16"\n'
            + "".join(f'[cases.{name}]\nprofiles = ["fp32"]\n' for name in ("in_place", "configured", "reads_at_call", "tiny"))
            + '[cases.integers]\nprofiles = ["fp32", "fp16"]\n[cases.wide]\nprofiles = ["fp32", "fp16"]\n'
            + '[cases.counting]\nprofiles = ["fp32"]\n[cases.determinant]\nprofiles = ["fp16"]\n[cases.loud]\nprofiles = ["fp16"]\n'
            + '[cases.floor_steps]\nprofiles = ["fp32"]\n')
    config = matrix_file(tmp_path, cache_dir, body, environments=("torch-host-cpu", "ort-host"), cases_dir=cases,
                         images_dir=_images_with_ort_host(tmp_path))
    done = cli("run", "-c", str(config))
    cells = read_run(list_runs(tmp_path / "reports")[-1]).set_index(["case", "profile", "env"])
    # plain torch: [3, 5, 7]; [1, 2] · 3 · 0.5 + 10 + 100; [2, 4]; counting: each call as the first one
    # sweep 19 M11: Python's 0.1 and the export's 0.1f put Floor on either side by 1e-7, within tolerance
    for case in ("in_place", "configured", "reads_at_call", "counting", "floor_steps"):
        assert list(cells.loc[(case, "fp32"), "status"]) == ["pass", "pass"], (case, done.stderr)
    with np.load(cache_dir / "artifacts" / cells.loc[("configured", "fp32", "ort-host"), "artifact"] / "reference.npz") as ref:
        assert [list(r) for r in ref.values()] == [[111.5, 113.0]]
    assert cells.loc[("integers", "fp16", "torch-host-cpu"), "status"] == "skipped"
    assert "nothing of it is FP16" in cells.loc[("integers", "fp16", "torch-host-cpu"), "error"]
    assert pd.isna(cells.loc[("integers", "fp16", "torch-host-cpu"), "max_abs"])  # L9: a skip measured nothing
    tiny = cells.loc[("tiny", "fp32", "torch-host-cpu")]
    assert tiny["status"] == "disputed" and "falls below float32's smallest normal value" in tiny["error"], tiny["error"]
    wide_half = (torch.tensor([1.0, 3.0]).half().double() * torch.tensor([1.0 + 2 ** -30]).half().double()
                 - torch.tensor([1.0, 3.0]).half().double()) * 2 ** 30  # `module.half()`: c is 1.0 in FP16
    assert cells.loc[("wide", "fp32", "torch-host-cpu"), "status"] == "pass"
    wide16 = cells.loc[("wide", "fp16", "torch-host-cpu")]
    assert wide16["status"] == "fail" and wide16["max_abs"] == pytest.approx(float(np.max(np.abs(
        wide_half.numpy() - np.array([1.0, 3.0]))))), wide16
    determinant = cells.loc[("determinant", "fp16", "torch-host-cpu")]
    assert determinant["status"] == "unsupported" and "not implemented for 'Half'" in determinant["error"], determinant
    assert cells.loc[("loud", "fp16", "torch-host-cpu"), "status"] == "fail"  # 300 · 300 · 4 · 0.25 = 9e4 > 65504
    loud = cli("repro", "loud/fp16/torch-host-cpu", "-c", str(config), "-o", str(tmp_path / "loud"))
    assert loud.returncode == 2 and "the module's own values leave FP16's range" in loud.stderr, loud.stderr
    assert not (tmp_path / "loud" / "ISSUE.md").exists()
    rounded = cli("repro", "wide/fp16/torch-host-cpu", "-c", str(config), "-o", str(tmp_path / "wide"))
    assert rounded.returncode == 2 and "the module's own FP16 values fail it" in rounded.stderr, rounded.stderr
    # repro's program.pt2, traced when asked for (no longer at every prepare): it runs, and gives the module's outputs
    artifacts = cache_dir / "artifacts" / cells.loc[("configured", "fp32", "torch-host-cpu"), "artifact"]
    program = torch.export.load(str(export_program(artifacts, "fp32")))
    with np.load(artifacts / "inputs.npz") as given:
        assert program.module()(torch.from_numpy(given["x"])).tolist() == [111.5, 113.0]
    np.save(cases / "w.npy", np.array([5.0], np.float32))
    again = cli("run", "-c", str(config), "--case", "reads_at_call")
    assert "prepare reads_at_call" in again.stdout + again.stderr and again.returncode == 0, again.stderr  # [5, 10]
    assert list(read_run(list_runs(tmp_path / "reports")[-1])["status"]) == ["pass", "pass"]
    for command, cell in (("explain", "in_place/fp32/torch-host-cpu"), ("precision", "integers/fp16/torch-host-cpu")):
        refused = cli(command, cell, "-c", str(config))
        assert refused.returncode == 2 and "is a torch cell" in refused.stderr and "Traceback" not in refused.stderr, \
            refused.stderr
