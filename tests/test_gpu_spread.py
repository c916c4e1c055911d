"""One GPU environment's cells spread over a host's free GPUs of the same model (a worker per GPU).
No machine here has several GPUs: `nvidia-smi` is faked (a script on PATH listing two H100s and an
A100), so the scheduling runs for real and the torch cells run on the CPU. Several real GPUs have
not run this."""

import os
import subprocess
import sys

import pytest

from conftest import BF16, NO_REAL_GPU, PROFILES, REPO, SMALL, fake_nvidia_smi, matrix_file
from matrix.store import list_runs, read_run

H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
BODY = PROFILES + BF16 + f"""
[cases.gemm_mha_fp16]
profiles = ["fp32", "fp16", "bf16"]
options = {SMALL["gemm_mha_fp16"]}
[cases.explicit_attention]
profiles = ["fp32", "fp16", "bf16"]
options = {SMALL["explicit_attention"]}
[cases.layernorm_block]
profiles = ["fp32", "bf16"]
options = {SMALL["layernorm_block"]}
gpus = ["*A100*"]
"""


def run_on(tmp_path, cache_dir, name, gpus):
    home = tmp_path / name
    home.mkdir()
    config = matrix_file(home, cache_dir, BODY, environments=("torch-host-cuda",))
    done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--no-reuse"], cwd=REPO,
                          capture_output=True, text=True,
                          env={**os.environ, **fake_nvidia_smi(tmp_path / f"{name}-bin", gpus), "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = list_runs(home / "reports")[-1]
    return read_run(run_dir).set_index("cell_id"), run_dir


@NO_REAL_GPU
def test_cells_of_one_environment_spread_over_the_free_gpus_of_its_model(tmp_path, cache_dir):
    """Two H100s and an A100: the environment leases GPU 0 (an H100) and takes the other H100, not
    the A100 (the cases' GPU routing was decided for an H100): a contiguous share of the cells
    each, in a warm worker each, with the same verdicts as on one GPU."""
    spread, run_dir = run_on(tmp_path, cache_dir, "spread", [H100, H100, A100])
    alone, _ = run_on(tmp_path, cache_dir, "alone", [H100])
    ran = spread[spread["status"] != "skipped"]
    assert len(ran) == 6 and set(ran["status"]) == {"pass"}
    assert list(ran["gpu_index"]) == [0, 0, 0, 1, 1, 1]  # plan order: a share each, cases kept together
    assert set(alone.loc[ran.index, "gpu_index"]) == {0}
    assert (spread["status"] == alone["status"]).all()
    assert (ran["max_abs"] == alone.loc[ran.index, "max_abs"]).all()  # the same CPU kernels either way
    routed = spread[spread["case"] == "layernorm_block"]
    assert (routed["status"] == "skipped").all() and routed["error"].str.endswith(f"this environment has {H100}").all()
    log = (run_dir / "envs" / "torch-host-cuda.log").read_text()  # the workers' own logs, kept with the run
    assert "the worker on GPU 0 (3 cells)" in log and "the worker on GPU 1 (3 cells)" in log


@pytest.mark.gpu
@pytest.mark.skipif(subprocess.run(["sh", "-c", "nvidia-smi -L 2>/dev/null | grep -c '^GPU'"], capture_output=True,
                                   text=True).stdout.strip() in ("", "0", "1"), reason="needs two NVIDIA GPUs or more")
def test_on_several_real_gpus_each_takes_a_share(tmp_path, cache_dir):
    """The same on a real multi-GPU host: each share on its own GPU, as the cells' own GPU facts say."""
    home = tmp_path / "real"
    home.mkdir()
    config = matrix_file(home, cache_dir, BODY.replace('gpus = ["*A100*"]', ""), environments=("torch-host-cuda",))
    done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    frame = read_run(list_runs(home / "reports")[-1])
    names = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True).stdout.split("\n")
    assert set(frame["status"]) <= {"pass", "fail"} and (frame["device"] == "cuda").all()  # judged on a GPU
    assert frame["gpu_index"].nunique() == sum(name.strip() == names[0].strip() for name in names if name.strip())
    assert all(gpu == names[int(index)].strip() for gpu, index in zip(frame["gpu"], frame["gpu_index"]))
