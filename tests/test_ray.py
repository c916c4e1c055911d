"""The matrix on a Ray cluster for real: a local cluster of three Ray nodes on this host (a head
that takes no tasks, an "L4" node and an "A100" node declaring those GPU models and Docker as
custom resources), onnxruntime environments in venvs and a container, against the local executor.

CI sets TRTMATRIX_REQUIRE_RAY=1, so a missing Ray fails there instead of skipping.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

from conftest import PROFILES, containers_of_cache, hanging, make_tiny_model, tiny_case, wait_for
from matrix.plan import build_plan
from matrix.run import MatrixRun
from matrix.store import list_runs, read_run
from test_reports_cli import cli
from test_stops import eventually, workers_of

pytestmark = pytest.mark.ray

# Ray rewrites a loopback address to this machine's interface address unless told that the
# cluster is local; set before Ray is imported (here and in every `trtmatrix run --ray` started).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

if os.environ.get("TRTMATRIX_REQUIRE_RAY") != "1":
    pytest.importorskip("ray", reason="Ray is an optional extra: pip install '.[ray]'")
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from matrix.executors.ray_cluster import RayExecutor  # noqa: E402

LOOPBACK = "127.0.0.1"
SMALL_STORE = 80 * 2**20  # each node's object store: results are small, the host has 2 cores


@pytest.fixture(scope="module")
def cluster():
    # Loopback only: every node listens on and connects to 127.0.0.1, not this machine's interfaces.
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": SMALL_STORE,
                                                            "node_ip_address": LOOPBACK})
    nodes = {model: cluster.add_node(num_cpus=4, resources={f"gpu:{model}": 1, "docker": 1},
                                     object_store_memory=SMALL_STORE, node_ip_address=LOOPBACK)
             for model in ("L4", "A100")}
    cluster.wait_for_nodes()
    assert cluster.address.startswith(f"{LOOPBACK}:"), cluster.address
    ray.init(address=cluster.address, log_to_driver=False)
    assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {LOOPBACK}
    ids = {model: next(n["NodeID"] for n in ray.nodes() if n["Alive"] and f"gpu:{model}" in n["Resources"])
           for model in nodes}
    yield cluster, nodes, ids
    ray.shutdown()
    cluster.shutdown()


def cases(tmp_path, hang: bool = False, tiny_timeout_s: float | None = None) -> str:
    """`tiny` anywhere (with its own timeout_s, when given); `on_l4` only on L4 GPUs; `on_h100`
    only on H100s, which no node has."""
    body = PROFILES + ('[profiles.hang]\ninject = "hang"\n' if hang else "")
    for name, gpus, profiles in (("tiny", None, ("fp32", "fp16", "hang") if hang else ("fp32", "fp16")),
                                 ("on_l4", "*L4*", ("fp32", "hang") if hang else ("fp32",)),
                                 ("on_h100", "*H100*", ("fp32",))):
        (tmp_path / name).mkdir()
        body += tiny_case(*make_tiny_model(tmp_path / name), profiles).replace("[cases.tiny]", f"[cases.{name}]")
        body += f'gpus = ["{gpus}"]\n' if gpus else ""
        body += f"timeout_s = {tiny_timeout_s}\n" if name == "tiny" and tiny_timeout_s else ""
    return body


@pytest.mark.docker
def test_the_matrix_runs_through_ray_with_the_statuses_of_a_local_run(cluster, write_matrix, tmp_path, docker_client,
                                                                    cache_dir):
    _, _, ids = cluster
    config = write_matrix(cases(tmp_path), environments=("ort-1.17", "ort-1.32", "ort-1.32-docker"))
    local = MatrixRun(build_plan(config)).judge().set_index("cell_id")

    address = ray.get_runtime_context().gcs_address
    reused = cli("run", "-c", str(config), "--ray", address)  # nothing to run: every result stored here
    assert reused.returncode == 0, reused.stderr
    again = read_run(list_runs(tmp_path / "reports")[-1])
    assert again["reused"].sum() == (again["status"] != "skipped").sum() > 0
    assert again.loc[again["reused"], "node"].eq(socket.gethostname()).all()  # where they ran, not a Ray node

    done = cli("run", "-c", str(config), "--ray", address, "--no-reuse")
    assert done.returncode == 0, done.stderr
    run_dir = list_runs(tmp_path / "reports")[-1]
    ran = read_run(run_dir).set_index("cell_id")
    assert not ran["reused"].any()

    away = ran[ran["case"] != "on_h100"]
    pd.testing.assert_series_equal(away["status"], local.loc[away.index, "status"])
    assert (away["status"] == "pass").all()
    nodes = {model: f"(Ray node {node_id[:8]})" for model, node_id in ids.items()}
    assert ran.loc[ran["case"] == "on_l4", "node"].str.endswith(nodes["L4"]).all()
    assert away["node"].str.endswith(tuple(nodes.values())).all()  # every cell ran on a worker node

    h100 = ran[ran["case"] == "on_h100"]
    assert (h100["status"] == "skipped").all()
    assert h100["error"].str.contains(r"GPUs matching \['\*H100\*'\]; no node of the Ray cluster").all()
    assert "Ray node" in (run_dir / "report.html").read_text()
    assert containers_of_cache(docker_client, cache_dir) == []


@pytest.mark.docker
def test_ctrl_c_cancels_the_ray_tasks_and_leaves_no_container(cluster, write_matrix, tmp_path, docker_client, cache_dir):
    config = write_matrix(cases(tmp_path, hang=True), environments=("ort-1.32-docker",), timeout_s=600)
    started = time.time()
    run = subprocess.Popen([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--no-reuse", "--ray",
                            ray.get_runtime_context().gcs_address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    both = {"tiny/hang/ort-1.32-docker", "on_l4/hang/ort-1.32-docker"}  # both parts hang in their containers
    assert wait_for(lambda: both <= hanging(cache_dir, started)), hanging(cache_dir, started)
    assert len(containers_of_cache(docker_client, cache_dir)) == 2
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=90)
    assert run.returncode == 128 + signal.SIGINT, stderr[-2000:]
    assert "stopped by SIGINT" in stderr and "Traceback" not in stderr
    assert eventually(lambda: containers_of_cache(docker_client, cache_dir)) == []
    # No task of the run holds a CPU of the cluster any more.
    assert ray.available_resources().get("CPU") == ray.cluster_resources().get("CPU")


@pytest.mark.docker
def test_a_node_killed_mid_run_loses_no_records_and_leaves_no_container(cluster, write_matrix, tmp_path, docker_client,
                                                                        cache_dir):
    head, nodes, ids = cluster
    # timeout_s 60: on a loaded machine the two parts' hang cells may start tens of seconds apart. `tiny`'s
    # own 10 s (issue 41p: a case's own timeout_s) end its hang cells early instead of waiting the 60 s out.
    config = write_matrix(cases(tmp_path, hang=True, tiny_timeout_s=10), environments=("ort-1.32", "ort-1.32-docker"),
                          timeout_s=60)
    plan = build_plan(config)
    run = MatrixRun(plan, reuse=False, executor=RayExecutor(ray.get_runtime_context().gcs_address))
    frame = {}
    thread = threading.Thread(target=lambda: frame.update(judged=run.judge()))
    started = time.time()
    thread.start()
    # Kill the L4 node while its parts of the run hang in their `hang` cells: the event, not a guess.
    on_l4 = {f"on_l4/hang/{env}" for env in plan.envs}
    assert wait_for(lambda: on_l4 <= hanging(cache_dir, started)), hanging(cache_dir, started)
    head.remove_node(nodes["L4"], allow_graceful=False)
    thread.join(timeout=180)
    assert not thread.is_alive()
    judged = frame["judged"].set_index("cell_id")
    assert sorted(judged.index) == sorted(c.cell_id for c in plan.cells)  # a record for every cell
    assert judged["status"].notna().all()
    # Cells the kill interrupted are `error` with a reason: their task lost with the node (no live
    # node has gpu:L4 any more), or, when the task outlived its worker by a moment, the worker's end.
    interrupted = judged[judged["status"] == "error"]
    assert interrupted["error"].str.contains("no live node of the Ray cluster has gpu:L4 any more|worker exited").all()
    assert set(interrupted["case"]) <= {"on_l4", "tiny"}
    assert (judged.loc[judged["case"] == "on_l4", "status"] != "timeout").all()  # none hung its 60 s out
    assert (judged.loc[judged["case"] == "on_h100", "status"] == "skipped").all()
    for env in plan.envs:  # `tiny` runs anywhere: on the A100 node, or again there when the L4 node died under it
        assert judged.loc[f"tiny/fp32/{env}", "status"] == "pass"
        assert judged.loc[f"tiny/hang/{env}", "status"] in ("timeout", "error")
        if judged.loc[f"tiny/hang/{env}", "status"] == "timeout":  # within its case's own 10 s, not the run's 60
            assert judged.loc[f"tiny/hang/{env}", "error"].startswith("not finished within 10s"), \
                judged.loc[f"tiny/hang/{env}", "error"]
    finished = judged[judged["status"].isin(["pass", "timeout"])]
    assert finished["node"].str.contains("(Ray node ", regex=False).all()
    assert eventually(lambda: workers_of(plan.path("cache_dir"))) == []  # no worker or cell outlived its node
    assert eventually(lambda: containers_of_cache(docker_client, cache_dir)) == []
