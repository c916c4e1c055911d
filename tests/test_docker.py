"""The docker backend for real: onnxruntime images built by the code under test (or by
scripts/setup-docker.sh), one container per environment, against the venv backend."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from conftest import PROFILES, REPO, matrix_file, tiny_case
from matrix.config import ConfigError
from matrix.envdefs import load_envdef
from matrix.gpus import host_gpus
from matrix.plan import build_plan
from matrix.run import MatrixRun
from matrix.store import read_run

pytestmark = pytest.mark.docker

MHA = """
[profiles.fp32]
precision = "fp32"
[profiles.fp16]
precision = "fp16"
[profiles.crash]
inject = "crash"

[cases.mha_transformer_block]
profiles = ["fp32", "fp16", "crash"]
"""


def run(config) -> pd.DataFrame:
    return read_run(MatrixRun(build_plan(config)).execute()).set_index("cell_id")


@pytest.fixture(scope="module")
def venv_and_docker(docker_client, tmp_path_factory, cache_dir):
    """One run: onnxruntime 1.17 in a venv and in a container, 1.32 in a container."""
    home = tmp_path_factory.mktemp("docker")
    config = matrix_file(home, cache_dir, MHA, environments=("ort-1.17", "ort-1.17-docker", "ort-1.32-docker"))
    return run(config)


def cell(frame, profile, env):
    return frame.loc[f"mha_transformer_block/batch=1/{profile}/{env}"]


def test_same_case_same_verdicts_in_venv_and_container(venv_and_docker):
    for profile in ("fp32", "fp16"):
        venv, container = cell(venv_and_docker, profile, "ort-1.17"), cell(venv_and_docker, profile, "ort-1.17-docker")
        assert venv["status"] == container["status"]
        assert container["max_abs"] == pytest.approx(venv["max_abs"], rel=1e-3)
    # The real finding, in both backends: onnxruntime 1.17's FP16 attention is far off the reference.
    assert cell(venv_and_docker, "fp16", "ort-1.17-docker")["status"] == "fail"
    assert cell(venv_and_docker, "fp16", "ort-1.32-docker")["status"] == "pass"


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
    assert cell(venv_and_docker, "fp16", "ort-1.32-docker")["status"] == "pass"


def test_result_files_belong_to_the_invoking_user(venv_and_docker, cache_dir):
    key = cell(venv_and_docker, "fp32", "ort-1.32-docker")["content_key"]
    result = cache_dir / "results" / key[:24] / "result.json"
    assert (result.stat().st_uid, result.stat().st_gid) == (os.getuid(), os.getgid())


def test_no_container_is_left_after_a_run(venv_and_docker, docker_client):
    leftovers = docker_client.containers.list(all=True, filters={"label": f"trtmatrix.host-pid={os.getpid()}"})
    assert leftovers == []


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
    from matrix.images import ensure_image

    images = tmp_path / "images"
    images.mkdir()
    tag = f"trtmatrix-test/retagged:{os.getpid()}"
    (images / "pulled.toml").write_text(
        f'engine = "onnxruntime"\nversion = "any"\nbackend = "docker"\nimage = "{tag}"\n')
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


def test_ctrl_c_during_a_docker_run_leaves_no_container(docker_client, write_matrix, tiny_model):
    model, inputs = tiny_model
    config = write_matrix(f"""
        [profiles.hang]
        inject = "hang"
        [cases.tiny]
        onnx = "{model}"
        inputs = "{inputs}"
        profiles = ["hang"]
        """, environments=("ort-1.32-docker",), timeout_s=600)
    host = subprocess.Popen([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--no-reuse"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    mine = {"label": f"trtmatrix.host-pid={host.pid}"}
    deadline = time.time() + 120
    while not docker_client.containers.list(filters=mine) and time.time() < deadline:
        time.sleep(0.5)
    assert docker_client.containers.list(filters=mine), "the worker container never started"
    time.sleep(2)  # the hanging cell is running inside the container now
    host.send_signal(signal.SIGINT)
    _, stderr = host.communicate(timeout=60)
    assert host.returncode != 0
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
    from matrix.images import ensure_image, local_tag

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
