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
from matrix.store.cache import result_dir
from matrix.worker.files import RESULT

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


def trtmatrix_run(tmp_path, cache_dir, name, gpus, body=BODY, **env):
    """`trtmatrix run --no-reuse` of `body` where nvidia-smi lists `gpus`, with `env` set."""
    home = tmp_path / name
    home.mkdir()
    config = matrix_file(home, cache_dir, body, environments=("torch-host-cuda",))
    done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--no-reuse"], cwd=REPO,
                          capture_output=True, text=True,
                          env={**os.environ, **fake_nvidia_smi(tmp_path / f"{name}-bin", gpus), "COLUMNS": "200", **env})
    return done, home


def run_on(tmp_path, cache_dir, name, gpus, body=BODY, **env):
    done, home = trtmatrix_run(tmp_path, cache_dir, name, gpus, body, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = list_runs(home / "reports")[-1]
    return read_run(run_dir).set_index("cell_id"), run_dir


@NO_REAL_GPU
def test_cells_of_one_environment_spread_over_the_free_gpus_of_its_model(tmp_path, cache_dir):
    """Two H100s and an A100: the environment leases GPU 0 (an H100) and takes the other H100, not
    the A100 (the cases' GPU routing was decided for an H100): the cells shared out between a
    warm worker each, each run once, with the same verdicts as on one GPU."""
    spread, run_dir = run_on(tmp_path, cache_dir, "spread", [H100, H100, A100])
    alone, _ = run_on(tmp_path, cache_dir, "alone", [H100])
    ran = spread[spread["status"] != "skipped"]
    assert len(ran) == 6 and set(ran["status"]) == {"pass"}
    assert set(ran["gpu_index"]) == {0, 1}  # both H100s ran cells; the A100 none
    assert set(alone.loc[ran.index, "gpu_index"]) == {0}
    assert (spread["status"] == alone["status"]).all()
    assert (ran["max_abs"] == alone.loc[ran.index, "max_abs"]).all()  # the same CPU kernels either way
    routed = spread[spread["case"] == "layernorm_block"]
    assert (routed["status"] == "skipped").all() and routed["error"].str.endswith(f"this environment has {H100}").all()
    log = (run_dir / "envs" / "torch-host-cuda.log").read_text()  # the workers' own logs, kept with the run
    for gpu in (0, 1):  # each worker's count of the cells it ran, as the cells' own gpu_index say
        assert f"the worker on GPU {gpu} ({(ran['gpu_index'] == gpu).sum()} cells)" in log
    # Judged while the environment ran: the first cell's judgement is older than the last cell's result.
    folders = [result_dir(cache_dir, "torch-host-cuda", key) for key in alone.loc[ran.index, "content_key"]]
    judged = [path.stat().st_mtime_ns for path in folders[0].glob("judgement-*.json")]
    assert len(judged) == 1 and judged[0] < max((folder / RESULT).stat().st_mtime_ns for folder in folders)


# The first case's cells take seconds each on a CPU, the second's milliseconds: cut in plan order,
# one share holds every slow cell.
UNEVEN = PROFILES + BF16 + """
[cases.mha_transformer_block]
profiles = ["fp16", "fp32", "bf16"]
options = { tokens = 1024, dim = 512, heads = 8, ffn = 2048 }
[cases.explicit_attention]
profiles = ["fp32", "fp16", "bf16"]
options = { tokens = 17, heads = 2 }
"""


@NO_REAL_GPU
@pytest.mark.parametrize("start", ["warm", "fork"])
def test_a_worker_that_finishes_its_share_takes_over_the_rest(tmp_path, cache_dir, start):
    """Two H100s, three slow cells then three fast ones: the worker whose share was the fast cells
    goes on with the slow share from its end, so a slow cell runs on GPU 1 too (shares cut once, in
    plan order, left all three on GPU 0); every cell still runs once. In a warm worker (torch's
    way) and with a process per cell (the supervisor's other loop)."""
    spread, run_dir = run_on(tmp_path, cache_dir, "uneven", [H100, H100], UNEVEN, TRTMATRIX_CELL_START=start)
    slow = spread[spread["case"] == "mha_transformer_block"]
    assert set(spread["status"]) == {"pass"} and len(spread) == 6
    assert 1 in set(slow["gpu_index"]) and 0 in set(slow["gpu_index"])
    log = (run_dir / "envs" / "torch-host-cuda.log").read_text()
    counts = [int(log.split(f"the worker on GPU {gpu} (")[1].split(" ")[0]) for gpu in (0, 1)]
    assert counts == [(spread["gpu_index"] == gpu).sum() for gpu in (0, 1)] and sum(counts) == 6


@NO_REAL_GPU
def test_cuda_visible_devices_holds_a_run_to_those_gpus(tmp_path, cache_dir):
    """CUDA_VISIBLE_DEVICES names the host's GPUs (nvidia-smi's indices) trtmatrix may lease: held
    to GPU 1 of two H100s, every cell runs there, with the verdicts of a run on both; empty, the GPU
    environment's cells are skipped saying why; a GPU the host lacks is one line, exit 2."""
    held, run_dir = run_on(tmp_path, cache_dir, "held", [H100, H100, A100], CUDA_VISIBLE_DEVICES="1")
    both, _ = run_on(tmp_path, cache_dir, "both", [H100, H100, A100], CUDA_VISIBLE_DEVICES="1,0")
    ran = held[held["status"] != "skipped"]
    assert len(ran) == 6 and set(ran["gpu_index"]) == {1} and set(both.loc[ran.index, "gpu_index"]) == {0, 1}
    assert (held["status"] == both["status"]).all()
    assert "the worker on GPU" not in (run_dir / "envs" / "torch-host-cuda.log").read_text()  # one worker
    none, _ = run_on(tmp_path, cache_dir, "none", [H100, H100], CUDA_VISIBLE_DEVICES="")
    assert (none["status"] == "skipped").all()
    assert set(none["error"]) == {"no NVIDIA GPU for trtmatrix (CUDA_VISIBLE_DEVICES is empty; nvidia-smi lists 2)"}
    for value in ("2", "0,0", "GPU-8f6a"):
        done, _ = trtmatrix_run(tmp_path, cache_dir, f"bad-{value}", [H100, H100], CUDA_VISIBLE_DEVICES=value)
        assert done.returncode == 2 and done.stderr.startswith(f"error: CUDA_VISIBLE_DEVICES={value}: ")
        assert len(done.stderr.splitlines()) == 1 and "0 NVIDIA H100 80GB HBM3, 1 NVIDIA H100" in done.stderr


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
