"""Nothing lost, nothing silent: runs stopped by signals at random moments, two runs at once, a
full disk, and paths that cannot be written. Real `trtmatrix run` processes, real venv workers and
real containers; the checks are what a user would look at (processes, containers, the results)."""

import os
import random
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from conftest import PROFILES, REPO, hanging, make_tiny_model, matrix_file, tiny_case, wait_for
from matrix.executors.local import LocalExecutor
from matrix.plan import build_plan
from matrix.run import MatrixRun
from matrix.store import cell_file, list_runs, read_run, stored_digests
from matrix.worker.files import LOG, OUTPUTS, file_digest

ENVS = ("ort-1.32", "ort-1.32-docker")
# Each run has work to do: the hang cell times out after 1 s and a timeout is never reused.
BODY = PROFILES + '[profiles.nan]\ninject = "nan"\n[profiles.crash]\ninject = "crash"\n[profiles.hang]\ninject = "hang"\n'
PROFILE_NAMES = ("fp32", "fp16", "nan", "crash", "hang")


def start(config: Path, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "250"})


def workers_of(cache: Path, started_by: int | None = None) -> list[str]:
    """Command lines of live processes that work on this cache (supervisors and cells); those
    `started_by` that process only, where given."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            status = (proc / "status").read_text().splitlines()
            state = next(line for line in status if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if str(cache) in cmdline and "trtmatrix_worker" in cmdline and " Z " not in state + " " and \
                (started_by is None or started_by in ancestors(int(proc.name))):
            found.append(cmdline)
    return found


def ancestors(pid: int) -> list[int]:
    found = []
    while pid > 1:
        try:
            pid = int(next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                           if line.startswith("PPid:")).split()[1])
        except (OSError, StopIteration):
            break
        found.append(pid)
    return found


def containers_of(docker_client, pid: int, running_only: bool) -> list:
    return docker_client.containers.list(all=not running_only, filters={"label": f"trtmatrix.host-pid={pid}"})


def verdicts(run_dir: Path) -> pd.DataFrame:
    return read_run(run_dir).set_index("cell_id")[["status", "max_abs", "nan_count"]].sort_index()


def eventually(check, seconds: float = 15.0):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if not value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


@pytest.fixture
def project(tmp_path, docker_client):
    model, inputs = make_tiny_model(tmp_path)
    cache = tmp_path / "cache"
    config = matrix_file(tmp_path, cache, BODY + tiny_case(model, inputs, PROFILE_NAMES), environments=ENVS,
                         timeout_s=1)
    return config, cache, tmp_path / "reports"


def test_signals_at_random_moments_leave_nothing_behind_and_the_run_resumes(project, docker_client):
    config, cache, reports = project
    reference_run = start(config)
    reference_run.communicate(timeout=300)
    assert reference_run.returncode == 0
    reference = verdicts(list_runs(reports)[-1])
    assert set(reference["status"]) == {"pass", "fail", "crash", "timeout"}

    rng = random.Random(20261123)
    stops = [signal.SIGTERM] * 5 + [signal.SIGKILL] * 5 + [signal.SIGHUP] * 2  # ~40 s of the suite's 20 min
    rng.shuffle(stops)
    pids = []
    for signum in stops:
        run = start(config, *(["--no-reuse"] if rng.random() < 0.5 else []))
        pids.append(run.pid)
        time.sleep(rng.uniform(0.3, 4.5))
        run.send_signal(signum)
        _, stderr = run.communicate(timeout=60)
        # 0/1: it finished before the signal came; -signum: it died before it had started anything.
        if run.returncode not in (0, 1, -signum):
            assert run.returncode == 128 + signum, stderr
            assert stderr.strip().splitlines()[-1].startswith(f"stopped by {signum.name}"), stderr
        # No worker process outlives its orchestrator, kill -9 included; nor does a running container.
        assert eventually(lambda: workers_of(cache)) == []
        assert eventually(lambda: containers_of(docker_client, run.pid, running_only=True)) == []
        if signum != signal.SIGKILL:
            assert containers_of(docker_client, run.pid, running_only=False) == []

    resumed = start(config)
    resumed.communicate(timeout=300)
    assert resumed.returncode == 0
    final = list_runs(reports)[-1]
    pd.testing.assert_frame_equal(verdicts(final), reference)  # no cell lost, none twice, same verdicts
    assert not list((reports / "runs").glob("*.partial"))  # a dead run's leftovers are cleaned up
    assert not any((cache / "held").iterdir())  # its links to results too (store/held_results.py)
    assert all(containers_of(docker_client, pid, running_only=False) == [] for pid in pids)
    for run_dir in list_runs(reports):  # every run folder that looks finished is finished
        assert (run_dir / "report.html").read_text().rstrip().endswith("</html>")
        assert len(read_run(run_dir)) == len(reference)


def test_two_runs_started_together_both_finish_with_the_same_verdicts(project):
    config, cache, reports = project
    runs = [start(config), start(config)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    first, second = list_runs(reports)
    pd.testing.assert_frame_equal(verdicts(first), verdicts(second))
    assert "skipped" not in set(verdicts(first)["status"])



class OtherRunBetween(LocalExecutor):
    """Before this run's results come back from their environment, another run of the same cells
    (`--no-reuse`) takes the environment's lock, empties every result folder and is stopped
    (SIGSTOP) while it runs them again; it goes on once this run has stored its own."""

    def __init__(self, config: Path, cache: Path):
        super().__init__(1)
        self.config, self.cache, self.other = config, cache, None

    def run_all(self, units, on_event, done):
        def then_done(unit, result):
            self.other = start(self.config, "--no-reuse")
            assert wait_for(lambda: workers_of(self.cache, self.other.pid), 120), self.other.communicate(timeout=60)
            self.other.send_signal(signal.SIGSTOP)
            done(unit, result)

        super().run_all(units, on_event, then_done)


def test_a_run_stores_its_own_results_while_another_run_empties_their_folders(tmp_path):
    """Issue 41: of two runs started together, one ended in `cell.log: No such file or directory`
    (the other had started the timed-out cell again); with --no-reuse it could store the other's files."""
    model, inputs = make_tiny_model(tmp_path)
    cache = tmp_path / "cache"
    config = matrix_file(tmp_path, cache, BODY + tiny_case(model, inputs, PROFILE_NAMES), environments=("ort-1.32",),
                         timeout_s=1)
    executor = OtherRunBetween(config, cache)
    try:
        run_dir = MatrixRun(build_plan(config), executor=executor).execute()
    finally:
        if executor.other:
            executor.other.send_signal(signal.SIGCONT)
    assert executor.other.wait(timeout=300) == 0, executor.other.communicate()
    cells = read_run(run_dir)
    assert set(cells["status"]) == {"pass", "fail", "crash", "timeout"}
    for cell in cells.itertuples():
        kept = {name: cell_file(run_dir, cell.content_key, name).is_file() for name in (OUTPUTS, LOG)}
        assert kept == {OUTPUTS: cell.status in ("pass", "fail"), LOG: True}, cell.cell_id
    assert stored_digests(run_dir) and all(file_digest(run_dir / name) == digest
                                            for name, digest in stored_digests(run_dir).items())
    assert not any((cache / "held").iterdir())  # the links are gone with the run that made them
    other = list_runs(tmp_path / "reports")[-1]
    pd.testing.assert_frame_equal(verdicts(other), verdicts(run_dir))


@contextmanager
def tmpfs(mount: Path, size: str):
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot mount a tmpfs in CI: {made.stderr.strip()}")
        pytest.skip(f"needs root to mount a small tmpfs: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: room for the cache's small files, not for a run folder and its report."""
    with tmpfs(tmp_path / "disk", "256k") as mount:
        yield mount


def test_a_full_disk_ends_the_run_with_one_line_and_status_3_and_no_run_folder(tmp_path, small_disk, tiny_model):
    model, inputs = tiny_model
    config = matrix_file(tmp_path, tmp_path / "cache", PROFILES + tiny_case(model, inputs, ("fp32", "fp16")),
                         environments=("ort-1.32",))
    config.write_text(config.read_text().replace(f'reports_dir = "{tmp_path / "reports"}"', f'reports_dir = "{small_disk}"'))
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 200_000)  # the disk fills up while the run writes its folder
    temporary = tmp_path / "tmp"  # issue 41, second sweep, 28g: every exit 3 left its file for good
    temporary.mkdir()
    for second in range(12):
        (temporary / f"trtmatrix-20260101T0000{second:02d}-1.traceback").write_text("an old one")
    run = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=REPO, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "COLUMNS": "250", "TMPDIR": str(temporary)})
    stderr = run.stderr
    assert run.returncode == 3, stderr
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("error: trtmatrix failed: OSError") and "No space left on device" in lines[-1]
    assert "Traceback" not in stderr
    traceback_file = Path(lines[-1].split("traceback in ")[1].split(";")[0])
    assert "No space left on device" in traceback_file.read_text()
    kept = sorted(temporary.glob("trtmatrix-*.traceback"))
    assert len(kept) == 10 and traceback_file in kept  # the newest ten
    runs = small_disk / "runs"
    assert list_runs(small_disk) == [] and not list(runs.glob("*.partial"))  # nothing that looks like a run
    assert not list(runs.glob(".*.lock"))  # nor the run's lock

    debug = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config), "--debug"], cwd=REPO,
                           capture_output=True, text=True)
    assert debug.returncode == 3 and "Traceback (most recent call last)" in debug.stderr


def test_a_full_disk_while_a_venv_is_made_is_the_runs_failure_not_the_environments(tmp_path, tiny_model):
    """Issue 41, second sweep, finding 14: a cache that filled up while a venv was made gave `error`
    cells ("uv pip sync failed 3 times … No space left on device"), exit 1 as an engine regression
    ("pass → error"). A full disk is the run's own failure: one line, status 3, as anywhere else."""
    with tmpfs(tmp_path / "disk", "16m") as small_disk:  # room for the worker's files, not for onnxruntime's 73 MB
        config = matrix_file(tmp_path, small_disk, PROFILES + tiny_case(*tiny_model, ("fp32",)),
                             environments=("ort-1.32",))
        run = start(config)
        _, stderr = run.communicate(timeout=300)
    assert run.returncode == 3, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: trtmatrix failed: OSError") and "No space left on device" in last, stderr
    assert "failed 3 times" not in stderr and f"{small_disk / 'venvs'}" in last


def test_outputs_that_cannot_be_written_are_one_line_and_status_2(write_matrix, tiny_model, tmp_path):
    model, inputs = tiny_model
    config = write_matrix(PROFILES + tiny_case(model, inputs))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True)

    junit = cli("run", "-c", str(config), "--junit-xml", str(tmp_path / "missing" / "junit.xml"))
    assert junit.returncode == 2 and junit.stderr.count("\n") == 1 and "no folder" in junit.stderr
    assert list_runs(tmp_path / "reports") == []  # checked before anything ran
    assert cli("run", "-c", str(config)).returncode == 0
    export = cli("export", "-c", str(config), "--format", "csv", "-o", str(tmp_path / "missing" / "out.csv"))
    assert export.returncode == 2 and export.stderr.count("\n") == 1 and f"no folder {tmp_path / 'missing'}" in export.stderr
    folder = cli("plan", "-c", str(tmp_path))
    assert folder.returncode == 2 and folder.stderr.count("\n") == 1 and "not a matrix file" in folder.stderr
    assert folder.stderr == f"error: {tmp_path}: not a matrix file (a folder)\n"


def test_an_output_that_fails_as_it_is_written_is_status_2_for_run_as_for_export(write_matrix, tiny_model, tmp_path):
    """issue 41, second sweep, finding 17: `run --junit-xml /dev/full` was exit 3 where `export -o
    /dev/full` is 2 for the same error; `-c /dev/null` said "(a folder?)" of what is no folder."""
    model, inputs = tiny_model
    config = write_matrix(PROFILES + tiny_case(model, inputs))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True)

    run = cli("run", "-c", str(config), "--junit-xml", "/dev/full")
    assert run.returncode == 2, run.stderr
    assert "error: --junit-xml /dev/full: No space left on device" in run.stderr and "Traceback" not in run.stderr
    assert run.stdout.strip() == str(list_runs(tmp_path / "reports")[-1])  # the run itself is written and said
    export = cli("export", "-c", str(config), "-o", "/dev/full")
    assert export.returncode == 2 and export.stderr == "error: -o /dev/full: No space left on device\n"
    for command in (["plan"], ["run"], ["history"]):
        device = cli(*command, "-c", "/dev/null")
        assert device.returncode == 2
        assert device.stderr == "error: /dev/null: not a matrix file (not a regular file: a pipe, a device or a socket)\n"


def test_a_supervisor_killed_outright_takes_its_hung_cell_down_and_the_run_says_so(tmp_path, tiny_model):
    """SIGKILL on the worker's supervisor (the OOM killer, a Ray worker killed with its node): the
    cell it forked dies with it instead of hanging on, and the run ends with the reason."""
    cache = tmp_path / "cache"
    config = matrix_file(tmp_path, cache, BODY + tiny_case(*tiny_model, ("hang",)), environments=("ort-1.32",),
                         timeout_s=120)
    run = start(config)

    def supervisor_and_cell():
        pids = {}
        for proc in Path("/proc").iterdir():
            try:
                cmdline = (proc / "cmdline").read_bytes()
                parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if str(cache).encode() in cmdline and b"trtmatrix_worker" in cmdline:
                pids[int(proc.name)] = parent
        supervisor = next((pid for pid, parent in pids.items() if parent == run.pid), None)
        cells = [pid for pid, parent in pids.items() if parent == supervisor]
        return (supervisor, cells[0]) if supervisor and cells else None

    deadline = time.monotonic() + 120
    while not (found := supervisor_and_cell()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert found, "the hang cell never started"
    supervisor, cell = found
    os.kill(supervisor, signal.SIGKILL)
    assert eventually(lambda: Path(f"/proc/{cell}").exists() and "Z" not in (Path(f"/proc/{cell}/stat").read_text()
                                                                               .rsplit(")", 1)[1].split()[0])) is False
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 0, stderr
    hung = read_run(list_runs(tmp_path / "reports")[-1]).set_index("cell_id").loc["tiny/hang/ort-1.32"]
    assert hung["status"] == "error" and "worker exited -9" in hung["error"]


def test_ctrl_c_stops_a_run_started_as_a_background_job(tmp_path, tiny_model):
    """`trtmatrix run &` in a script or a CI step inherits SIGINT ignored (POSIX shells do that to
    background jobs), and Python then installs no Ctrl-C handler: trtmatrix installs its own, so the
    run still stops at once, leaving no worker, instead of hanging its cell out."""
    cache = tmp_path / "cache"
    config = matrix_file(tmp_path, cache, BODY + tiny_case(*tiny_model, ("hang",)), environments=("ort-1.32",),
                         timeout_s=600)
    run = subprocess.Popen([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert wait_for(lambda: hanging(cache)) == {"tiny/hang/ort-1.32"}
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGINT and "stopped by SIGINT" in stderr and "Traceback" not in stderr
    assert eventually(lambda: workers_of(cache)) == []


def test_ctrl_c_while_trtmatrix_imports_is_not_lost(tmp_path, tiny_model):
    """Issue 41: a kill -INT to a background `trtmatrix run &` (SIGINT inherited ignored) in its
    first third of a second, while it imports, was lost: the run went on into its hanging cell.
    Here the signal comes once the command's module is imported, before its entry point runs."""
    config = matrix_file(tmp_path, tmp_path / "cache", BODY + tiny_case(*tiny_model, ("hang",)),
                         environments=("ort-1.32",), timeout_s=600)
    script = ("import os, signal, sys\n"
              "signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job inherits it\n"
              "import matrix.cli\n"
              "os.kill(os.getpid(), signal.SIGINT)\n"
              f"sys.argv = ['trtmatrix', 'run', '-c', {str(config)!r}]\n"
              "matrix.cli.main()\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 128 + signal.SIGINT and "stopped by SIGINT" in run.stderr, run.stderr


def test_ci_prints_the_slowest_tests():
    """A CI run that fails on a loaded machine shows where its time went."""
    pytest_line = next(line for line in (REPO / ".ci" / "run").read_text().splitlines() if "-m pytest" in line)
    assert "--durations=40" in pytest_line.split()


def test_a_run_with_its_stdout_or_stderr_closed_ends_well(tmp_path, tiny_model):
    """Issue 41, third sweep, finding 7: `trtmatrix run >&-` (a cron or nohup set-up may close a
    stream) ended with a traceback and exit 1, the regression code, after a run that went well."""
    config = matrix_file(tmp_path, tmp_path / "cache", PROFILES + tiny_case(*tiny_model), environments=("ort-1.32",))
    for closed in ("1", "2"):
        done = subprocess.run(["bash", "-c", f'"$0" -m matrix.cli run -c "$1" {closed}>&-', sys.executable, str(config)],
                              cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (closed, done.stderr)
