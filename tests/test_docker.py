"""The docker backend for real: onnxruntime images built by the code under test (or by
scripts/setup-docker.sh), one container per environment, against the venv backend."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import PROFILES, REPO, hanging, make_tiny_model, matrix_file, tiny_case, wait_for
from matrix.config import ConfigError
from matrix.environments.definitions import load_envdef
from matrix.environments.gpus import host_gpus
from matrix.plan import build_plan
from matrix.run import MatrixRun
from matrix.store import read_run

pytestmark = pytest.mark.docker

CASES = """
[profiles.fp32]
precision = "fp32"
[profiles.fp16]
precision = "fp16"
[profiles.crash]
inject = "crash"

[cases.mha_transformer_block]
profiles = ["crash", "fp32"]      # the crash first: the cell after it must still run

[cases.wrong]                     # a failure the test owns: expected outputs no engine gives
onnx = "{model}"
inputs = "{inputs}"
expected = "{expected}"
profiles = ["fp32"]

[cases.tiny]                      # the FP16 copy made on the host, run inside the container
onnx = "{model}"
inputs = "{inputs}"
profiles = ["fp16"]
"""


def run(config) -> pd.DataFrame:
    return read_run(MatrixRun(build_plan(config)).execute()).set_index("cell_id")


@pytest.fixture(scope="module")
def venv_and_docker(docker_client, tmp_path_factory, cache_dir):
    """One run: onnxruntime 1.17 in a venv and in a container, 1.32 in a container."""
    home = tmp_path_factory.mktemp("docker")
    model, inputs = make_tiny_model(home)
    expected = home / "wrong_expected.npz"
    np.savez(expected, y=np.full((4, 8), 2.0))  # y = tanh(...) never reaches 2: off by more than 1
    body = CASES.format(model=model, inputs=inputs, expected=expected)
    config = matrix_file(home, cache_dir, body, environments=("ort-1.17", "ort-1.17-docker", "ort-1.32-docker"))
    return run(config)


def cell(frame, profile, env):
    return frame.loc[f"mha_transformer_block/batch=1/{profile}/{env}"]


def test_same_case_same_verdicts_in_venv_and_container(venv_and_docker):
    for cell_id in ("mha_transformer_block/batch=1/fp32", "tiny/fp16", "wrong/fp32"):
        venv, container = venv_and_docker.loc[f"{cell_id}/ort-1.17"], venv_and_docker.loc[f"{cell_id}/ort-1.17-docker"]
        assert venv["status"] == container["status"]
        assert container["max_abs"] == pytest.approx(venv["max_abs"], rel=1e-3)
    assert cell(venv_and_docker, "fp32", "ort-1.17-docker")["status"] == "pass"
    assert venv_and_docker.loc["tiny/fp16/ort-1.17-docker", "status"] == "pass"
    # A failing cell is judged the same way in both: outputs came back and were compared.
    assert venv_and_docker.loc["wrong/fp32/ort-1.17-docker", "status"] == "fail"
    assert venv_and_docker.loc["wrong/fp32/ort-1.17-docker", "max_abs"] > 1


def test_each_container_reports_its_own_versions(venv_and_docker):
    old, new = cell(venv_and_docker, "fp32", "ort-1.17-docker"), cell(venv_and_docker, "fp32", "ort-1.32-docker")
    assert (old["engine_version"], new["engine_version"]) == ("1.17.3", "1.32.0")
    # The containers' Python (Debian bookworm's 3.11), not the host's.
    assert old["python_version"].startswith("3.11.") and old["python_version"] == new["python_version"]
    assert old["image"].startswith("trtmatrix/ort-1-17-docker:")
    assert old["image_digest"].startswith("sha256:") and old["image_digest"] != new["image_digest"]
    assert pd.isna(cell(venv_and_docker, "fp32", "ort-1.17")["image"])


def test_a_crash_inside_a_container_stays_in_its_cell(venv_and_docker):
    crashed = cell(venv_and_docker, "crash", "ort-1.32-docker")
    assert crashed["status"] == "crash"
    assert "SIGSEGV" in crashed["error"]
    assert "Fatal Python error" in crashed["log_tail"]  # faulthandler's report, kept with the cell
    # The cells after it in the same container still ran.
    assert cell(venv_and_docker, "fp32", "ort-1.32-docker")["status"] == "pass"
    assert venv_and_docker.loc["wrong/fp32/ort-1.32-docker", "status"] == "fail"


def test_result_files_belong_to_the_invoking_user(venv_and_docker, cache_dir):
    key = cell(venv_and_docker, "fp32", "ort-1.32-docker")["content_key"]
    result = cache_dir / "results" / "ort-1.32-docker" / key[:24] / "result.json"
    assert (result.stat().st_uid, result.stat().st_gid) == (os.getuid(), os.getgid())


def test_no_container_is_left_after_a_run(venv_and_docker, docker_client):
    leftovers = docker_client.containers.list(all=True, filters={"label": f"trtmatrix.host-pid={os.getpid()}"})
    assert leftovers == []


def docker_backend(cache):
    from matrix.environments.docker import DockerBackend
    from matrix.environments.staging import stage_worker

    backend = DockerBackend(load_envdef(REPO / "images" / "ort-1.32-docker.toml"), cache, stage_worker(cache))
    backend.prepare()
    return backend


@pytest.mark.skipif(bool(host_gpus()), reason="this host has a GPU: the container would start")
def test_a_container_that_cannot_start_is_removed(docker_client, tmp_path):
    """Without a GPU, asking for GPU 0 fails when the container starts, after it was created."""
    from matrix.environments.backend import EnvironmentUnavailable

    with pytest.raises(EnvironmentUnavailable, match="did not start"):
        docker_backend(tmp_path / "cache").start(["probe", "onnxruntime"], tmp_path / "env.log", gpu=0)
    assert docker_client.containers.list(all=True, filters={"label": f"trtmatrix.host-pid={os.getpid()}"}) == []


# Run inside a worker container: which folders take a new file, and what the process may do.
INSIDE = """
import json, os, resource, sys
wrote = {}
for folder in sys.argv[1:]:
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "probe"), "w") as fh:
            fh.write("x")
        wrote[folder] = "yes"
    except OSError as exc:
        wrote[folder] = exc.strerror
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
shm = os.statvfs("/dev/shm")
print(json.dumps({"wrote": wrote, "NoNewPrivs": status["NoNewPrivs"].strip(), "CapEff": status["CapEff"].strip(),
                  "stack": resource.getrlimit(resource.RLIMIT_STACK)[0], "shm": shm.f_blocks * shm.f_frsize}))
"""


def test_a_container_gets_no_privileges_and_only_its_own_folders(docker_client, tmp_path):
    """`docker inspect` of a real worker container started by the backend, and writes tried from
    inside it while its (hanging) cell runs."""
    from matrix.environments.backend import running
    from matrix.environments.docker import PIDS_LIMIT
    from matrix.store.cache import engine_caches, result_dir

    cache = (tmp_path / "cache").resolve()
    backend = docker_backend(cache)
    envdef, worker_home = backend.envdef, backend.worker_home
    own, (timing, _) = result_dir(cache, envdef.name, "a" * 64), engine_caches(cache, envdef.name, backend.fingerprint(), None)
    other = result_dir(cache, "ort-1.17-docker", "b" * 64)  # another environment's stored result
    other.mkdir(parents=True)
    inputs = cache / "artifacts" / "case" / "inputs.npz"
    inputs.parent.mkdir(parents=True)
    np.savez(inputs, x=np.zeros(1, np.float32))
    job = cache / "jobs" / f"{envdef.name}.json"
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(json.dumps({"env": envdef.name, "cells": [{
        "cell_id": "hang", "engine": "onnxruntime", "model": "", "inputs": str(inputs), "node_types": "",
        "profile": {"inject": "hang"}, "out_dir": str(own), "timing_cache": str(timing), "timeout_s": 300}]}))

    with running(lambda: backend.start(["run", str(job)], tmp_path / "env.log", None)) as worker:
        container = worker.container
        container.reload()
        config, mounts = container.attrs["HostConfig"], container.attrs["Mounts"]
        allowed = [own, timing.parent, "/tmp"]
        elsewhere = [other, cache / "results", cache / "timing", cache / "artifacts", worker_home]
        code, output = container.exec_run([envdef.python or "python3", "-c", INSIDE,
                                           *map(str, allowed + elsewhere), "/", "/usr/lib"])
    assert code == 0, output.decode()
    inside = json.loads(output)

    assert config["CapDrop"] == ["ALL"] and not config["CapAdd"] and not config["Privileged"]
    assert config["SecurityOpt"] == ["no-new-privileges"]
    assert config["PidsLimit"] == PIDS_LIMIT > 0
    assert config["ReadonlyRootfs"] is True and list(config["Tmpfs"]) == ["/tmp"]
    assert config["NetworkMode"] == "none"
    assert config["ShmSize"] == 1 << 30
    # NVIDIA's stack size for NGC images; unlimited locked memory only with a GPU (not here).
    assert {u["Name"]: (u["Soft"], u["Hard"]) for u in config["Ulimits"]} == {"stack": (64 << 20, 64 << 20)}
    writable = {m["Source"] for m in mounts if m["RW"]}
    assert writable == {str(cache / "results" / envdef.name), str(cache / "timing" / envdef.name)}
    assert {m["Source"] for m in mounts if not m["RW"]} == {str(worker_home), str(cache / "artifacts"),
                                                           str(cache / "jobs")}

    assert (inside["NoNewPrivs"], int(inside["CapEff"], 16)) == ("1", 0)
    assert (inside["stack"], inside["shm"]) == (64 << 20, 1 << 30)
    assert [inside["wrote"][str(folder)] for folder in allowed] == ["yes"] * 3
    assert (own / "probe").is_file() and (timing.parent / "probe").is_file()
    # Nothing written anywhere else reaches the host (a path under /tmp lands in the container's
    # own tmpfs; elsewhere the write fails), and the image cannot be changed.
    assert [folder for folder in elsewhere if (folder / "probe").exists()] == []
    assert list(other.iterdir()) == []
    for refused in (cache / "artifacts", worker_home, "/", "/usr/lib"):
        assert inside["wrote"][str(refused)] == "Read-only file system"


def test_an_absent_unpullable_image_skips_its_cells_and_the_rest_runs(docker_client, write_matrix, tmp_path,
                                                                      tiny_model):
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(REPO / "images" / "ort-1.32.toml", images)
    (images / "nowhere.toml").write_text(
        'engine = "onnxruntime"\nversion = "1.32.0"\nbackend = "docker"\n'
        'image = "registry.invalid/trtmatrix/absent:1"\n')
    model, inputs = tiny_model
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=("nowhere", "ort-1.32"), images_dir=images)
    frame = run(config)
    skipped = frame.loc["tiny/fp32/nowhere"]
    assert skipped["status"] == "skipped"
    assert "registry.invalid/trtmatrix/absent:1" in skipped["error"] and "could not be pulled" in skipped["error"]
    assert frame.loc["tiny/fp32/ort-1.32"]["status"] == "pass"


def test_a_retagged_image_reruns_its_cells(docker_client, write_matrix, tmp_path, tiny_model):
    """What a re-pulled tag does: same definition, new image id → the stored result is not reused."""
    from matrix.environments.images import ensure_image

    images = tmp_path / "images"
    images.mkdir()
    tag = f"trtmatrix-test/retagged:{os.getpid()}"
    (images / "pulled.toml").write_text(
        f'engine = "onnxruntime"\nversion = "1.0"\nbackend = "docker"\nimage = "{tag}"\n')
    old = ensure_image(docker_client, load_envdef(REPO / "images" / "ort-1.17-docker.toml"))
    new = ensure_image(docker_client, load_envdef(REPO / "images" / "ort-1.32-docker.toml"))
    model, inputs = tiny_model
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=("pulled",), images_dir=images)
    try:
        old.tag(tag)
        first, again = run(config).loc["tiny/fp32/pulled"], run(config).loc["tiny/fp32/pulled"]
        new.tag(tag)
        after = run(config).loc["tiny/fp32/pulled"]
    finally:
        docker_client.images.remove(tag)
    assert (first["engine_version"], bool(first["reused"])) == ("1.17.3", False)
    assert (again["engine_version"], bool(again["reused"])) == ("1.17.3", True)
    assert (after["engine_version"], bool(after["reused"])) == ("1.32.0", False)
    assert after["image_digest"] == new.id != first["image_digest"]


def test_ctrl_c_during_a_docker_run_leaves_no_container(docker_client, write_matrix, tiny_model, cache_dir):
    model, inputs = tiny_model
    config = write_matrix(f"""
        [profiles.hang]
        inject = "hang"
        [cases.tiny]
        onnx = "{model}"
        inputs = "{inputs}"
        profiles = ["hang"]
        """, environments=("ort-1.32-docker",), timeout_s=600)
    started = time.time()
    host = subprocess.Popen([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--no-reuse"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    mine = {"label": f"trtmatrix.host-pid={host.pid}"}
    # The event, not a guess at how long a loaded machine takes: the cell says it hangs now.
    assert "tiny/hang/ort-1.32-docker" in wait_for(lambda: hanging(cache_dir, started)), "the hang cell never started"
    assert docker_client.containers.list(filters=mine)
    host.send_signal(signal.SIGINT)
    _, stderr = host.communicate(timeout=60)
    assert host.returncode == 128 + signal.SIGINT
    assert docker_client.containers.list(all=True, filters=mine) == []
    assert "Traceback" not in stderr


@pytest.mark.parametrize("field, value", [
    ("image", "alpine; touch /tmp/pwned"),
    ("image", "$(touch /tmp/pwned)"),
    ("image", "alpine:latest && rm -rf /"),
    ("dockerfile", "../../etc/passwd"),
    ("dockerfile", "Dockerfile.onnxruntime`id`"),
])
def test_shell_metacharacters_in_definitions_are_rejected(tmp_path, field, value):
    definition = tmp_path / "bad.toml"
    definition.write_text(f'engine = "onnxruntime"\nversion = "1"\nbackend = "docker"\n{field} = {value!r}\n'
                          .replace("'", '"'))
    with pytest.raises(ConfigError) as err:
        load_envdef(definition)
    assert err.value.key == field
    assert not os.path.exists("/tmp/pwned")


def test_environment_file_names_with_metacharacters_are_rejected(tmp_path):
    definition = tmp_path / "x;rm -rf ~.toml"
    definition.write_text('engine = "onnxruntime"\nversion = "1"\nbackend = "venv"\nrequirements = ["x"]\n')
    with pytest.raises(ConfigError) as err:
        load_envdef(definition)
    assert err.value.key == "name"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})


def test_images_build_skips_up_to_date_and_check_says_why_not(docker_client):
    from matrix.environments.images import ensure_image, local_tag

    envdef = load_envdef(REPO / "images" / "ort-1.32-docker.toml")
    ensure_image(docker_client, envdef)
    built = cli("images", "build", "ort-1.32-docker")
    assert built.returncode == 0 and f"{local_tag(envdef)} up to date" in built.stdout
    check = cli("images", "check", "ort-1.32-docker", "trt-10.8")
    assert check.returncode == 0
    rows = {line.split("│")[1].strip(): line for line in check.stdout.splitlines() if line.count("│") > 3}
    assert "yes" in rows["ort-1.32-docker"].split("│")[5]
    if not host_gpus():
        assert "no NVIDIA GPU on this host" in rows["trt-10.8"]


def test_containers_whose_run_is_gone_or_stopped_are_removed_and_no_others(docker_client):
    """What a run removes before it starts, and a Ray run after Ctrl-C on every node: containers
    whose starting process is gone — a zombie too (a Ray worker its raylet killed, not yet reaped) —
    and, for a stopped run, every one of its own; never a live run's."""
    from matrix.environments.docker import LABEL, remove_dead_runs_containers
    from matrix.store.records import HOST

    zombie = subprocess.Popen(["true"])
    deadline = time.time() + 10
    while time.time() < deadline and open(f"/proc/{zombie.pid}/stat").read().rpartition(")")[2].split()[0] != "Z":
        time.sleep(0.05)
    made = {}
    for name, pid, run in (("zombie", zombie.pid, "r1"), ("live", os.getpid(), "r2"), ("stopped", os.getpid(), "r3")):
        made[name] = docker_client.containers.create(
            "trtmatrix-test/python:3.11", ["true"], name=f"trtmatrix-test-{name}-{os.getpid()}",
            labels={LABEL: "worker", f"{LABEL}.host": HOST, f"{LABEL}.host-pid": str(pid), f"{LABEL}.run": run})
    try:
        removed = remove_dead_runs_containers(docker_client, stopped_run="r3")
        assert sorted(removed) == sorted(made[n].name for n in ("zombie", "stopped"))
        assert [c.name for c in docker_client.containers.list(all=True, filters={"label": f"{LABEL}.run=r2"})] == [
            made["live"].name]
    finally:
        zombie.wait()
        for container in made.values():
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - removed by the code under test
                pass


@pytest.mark.parametrize("lacking", ["numpy", "onnxruntime"])
def test_an_image_without_numpy_is_one_line_naming_the_image_not_a_traceback(docker_client, write_matrix, tmp_path,
                                                                             tiny_model, lacking):
    """Issue 41, tracebacks: an image without numpy gave a Python traceback as the cell's error, one
    without its engine's package a ModuleNotFoundError on every cell. The image is the shipped
    ort-1.32-docker one with the package removed (built here, nothing pulled)."""
    from matrix.environments.images import ensure_image
    from test_bad_values import TRTMATRIX

    base = ensure_image(docker_client, load_envdef(REPO / "images" / "ort-1.32-docker.toml"))
    tag = f"trtmatrix-test/no-{lacking}:{os.getpid()}"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base.id}\nRUN python3 -c 'import {lacking}, os, shutil; shutil.rmtree(os.path.dirname({lacking}.__file__))'\n")
    docker_client.images.build(path=str(tmp_path), tag=tag, rm=True)
    images = tmp_path / "images"
    images.mkdir()
    (images / "lacking.toml").write_text(f'engine = "onnxruntime"\nversion = "1.32.0"\nbackend = "docker"\nimage = "{tag}"\n')
    model, inputs = tiny_model
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=("lacking",), images_dir=images)
    try:
        done = subprocess.run([TRTMATRIX, "run", "-c", str(config)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "COLUMNS": "250"})
    finally:
        docker_client.images.remove(tag)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    cell = read_run(Path(done.stdout.strip().splitlines()[-1])).iloc[0]
    assert cell["status"] == "error"
    assert re.fullmatch(rf"lacking: No module named '{lacking}' in its Python 3\.\d+\.\d+; the worker needs numpy and "
                        rf"onnxruntime in the image {re.escape(tag)}", cell["error"]), cell["error"]
    assert f"ERR ×1 lacking: No module named '{lacking}' in its Python" in done.stderr


def test_a_cell_killed_by_the_out_of_memory_killer_says_so(docker_client, monkeypatch):
    """A stranger's explain of a large detector in FP16 ended "killed by SIGKILL": the kernel's OOM
    killer (17.4 GB of 23), which nothing said. A real OOM kill (a container of 48 MB allocating 200 MB)
    between a cell's start and its death is said on the crash; a SIGKILL with no OOM kill is not."""
    import signal

    from matrix.worker import supervisor
    from matrix.worker.oom import oom_kills, oom_note

    assert oom_kills() is not None  # Linux 4.13+: the count is there to read
    monkeypatch.setattr(supervisor, "OOM_KILLS_AT_START", oom_kills())  # the cell starts now
    assert supervisor._ended(signal.SIGKILL, False, 10) == ("crash", "killed by SIGKILL")
    ended = docker_client.containers.run("trtmatrix-test/python:3.11", ["python3", "-c", "x = bytearray(200 << 20)"],
                                         mem_limit="48m", memswap_limit="48m", detach=True)
    try:
        assert ended.wait(timeout=60)["StatusCode"] == 137
    finally:
        ended.remove(force=True)
    status, error = supervisor._ended(signal.SIGKILL, False, 10)
    assert status == "crash" and error.startswith("killed by SIGKILL; the kernel's out-of-memory killer acted")
    assert "most likely out of memory" in error and oom_note(oom_kills()) == ""
    assert supervisor._ended(signal.SIGSEGV, False, 10) == ("crash", "killed by SIGSEGV")
