"""Nothing silent, part three (issue 33, points 4-11): no stale verdict kept in silence, no known
issue that can never apply, outputs that never replace what is not theirs, runs that end, stops
that leave nothing behind, damaged stored files named, no quiet misreading of the command line,
no text that breaks its format. Real `trtmatrix` processes, real venv workers, real files; each
test failed before its fix."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import stat
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper

from conftest import PROFILES, make_tiny_model, matrix_file, tiny_case
from matrix.store import cell_file, list_runs, read_run, run_reference
from matrix.worker.files import OUTPUTS
from test_bad_values import CASE_FILE, TRTMATRIX, refused
from test_nothing_silent import toy  # noqa: F401 - the fixture: case file `toy` (batch = [1]; its build raises)

ENV, OLD = "ort-1.32", "ort-1.17"
FP16 = "tiny/fp16/ort-1.32"
TIGHT_FP16 = "[cases.tiny.tolerances.fp16]\natol = 1e-9\nrtol = 0.0\n"
HANG = '[profiles.hang]\ninject = "hang"\n'


def trtmatrix(*args, timeout=300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([TRTMATRIX, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "250", **kwargs.pop("env", {})}, **kwargs)


def start(*args, **kwargs) -> subprocess.Popen:
    """A `trtmatrix` in a process group of its own (a terminal's Ctrl-C reaches the whole group)."""
    return subprocess.Popen([TRTMATRIX, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "COLUMNS": "250"}, **kwargs)


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z" and int(proc.name) != os.getpid():
            found.append(int(proc.name))
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:  # gone meanwhile
        return ""


def children(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if int((proc / "stat").read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(proc.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def wait_for(check, seconds: float = 120.0):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.1)
    return value


def damage(path: Path, change) -> None:
    """A run folder's file replaced by a damaged copy: it is a hard link to the result cache's file,
    which other tests of the session reuse."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(change(data))


@pytest.fixture
def tiny(tmp_path, write_matrix):
    """The tiny model's matrix on ort-1.32 and ort-1.17 (FP16 failing at its tight tolerance), run once."""
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs, ("fp32", "fp16")) + TIGHT_FP16, environments=(ENV, OLD))
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 0, done.stderr
    return config, list_runs(tmp_path / "reports")[-1]


# --- 4, 9: report never keeps a verdict it could not re-judge in silence; damaged cells named ----

def test_report_says_which_cells_it_could_not_rejudge_on_the_cell_and_exits_2(tiny):
    config, run_dir = tiny
    cells = read_run(run_dir).set_index("cell_id")
    assert cells.loc[FP16, "status"] == "fail"
    gone = cell_file(run_dir, cells.loc[FP16, "content_key"], OUTPUTS)
    gone.unlink()
    config.write_text(config.read_text().replace("atol = 1e-9", "atol = 1.0"))  # every cell would pass now
    done = trtmatrix("report", "-c", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: 1 cells not re-judged (their verdicts are the run's, marked in the report): {gone} is missing")
    again = read_run(run_dir).set_index("cell_id")
    assert again.loc[FP16, "status"] == "fail" and again.loc[FP16, "atol"] == 1e-9  # the run's, and said so
    assert again.loc[FP16, "error"].startswith(f"not re-judged: {gone} is missing")
    assert again.loc["tiny/fp16/ort-1.17", "status"] == "pass"  # the others are re-judged as ever
    assert "not re-judged" in (run_dir / "report.html").read_text() + "".join(
        p.read_text() for p in (run_dir / "report-details").glob("*.js"))

    reference = run_reference(run_dir, cells.loc[FP16, "artifact"])
    damage(reference, lambda _: b"not an npz")
    done = trtmatrix("report", "-c", str(config))
    assert done.returncode == 2
    assert f"4 cells not re-judged" in done.stderr and f"{reference} cannot be read (not an .npz archive)" in done.stderr


def test_a_damaged_cell_file_is_named_by_the_commands_that_read_it(tiny):
    config, run_dir = tiny
    cells = read_run(run_dir).set_index("cell_id")
    damaged = cell_file(run_dir, cells.loc["tiny/fp32/ort-1.32", "content_key"], OUTPUTS)
    damage(damaged, lambda data: data[:60])  # truncated
    line = refused("diff", run_dir.name, "-c", str(config))
    assert line.startswith(f"error: {damaged}: cannot be read, a damaged run?")
    done = trtmatrix("report", "-c", str(config))
    assert done.returncode == 2 and f"{damaged} cannot be read" in done.stderr.splitlines()[-1]
    # issue 41, sweep 3 #1: junk for a cell's .npz made diff relay numpy's advice to unpickle it
    # ("load it unsafely using the allow_pickle= keyword"); report said "not an .npz archive"
    damage(damaged, lambda _: b"junk")
    assert refused("diff", run_dir.name, "-c", str(config)) == (
        f"error: {damaged}: cannot be read, a damaged run? (not an .npz archive)")


# --- 5: known issues that could never apply, and two that apply to one cell ----------------------

ISSUE = ('[[issue]]\nid = "{id}"\ntitle = "t"\ncase = "{case}"\nprofiles = ["fp16"]\nengine = "onnxruntime"\n'
         'versions = "{versions}"\nexpected = "{expected}"\nsource = "this test"\n')


@pytest.mark.parametrize("versions", [">=2,<1", "==1.20.1,==1.17.3", "<0"])
def test_a_version_range_that_holds_no_version_is_refused(toy, versions):
    cases, config = toy
    (cases / "known_issues.toml").write_text(ISSUE.format(id="x", case="toy", versions=versions, expected="fail"))
    assert refused("plan", "-c", str(config)) == (
        f"error: {cases / 'known_issues.toml'}: issue.0.versions: {versions!r} matches no version at all: the "
        "entry could never apply")


@pytest.mark.parametrize("value, kind", [('"1"', "text"), ("true", "a boolean")])
def test_a_parameter_value_of_another_kind_than_the_case_s_is_refused(toy, value, kind):
    cases, config = toy
    (cases / "known_issues.toml").write_text(ISSUE.format(id="x", case="toy", versions=">=1.17", expected="fail")
                                             + f"params = {{ batch = {value} }}\n")
    line = refused("plan", "-c", str(config))
    assert line.startswith(f"error: {cases / 'known_issues.toml'}: issue.0.params.batch: ") and \
        line.endswith(f"is {kind}; case 'toy' has batch = [1] (a number): it could never match")


def test_a_fault_entry_expecting_an_error_takes_only_an_error_of_its_words(tmp_path, write_matrix):
    """Issue 41, sweep 11 (sweep 10 C7, its error side): a `fault` entry on Neg expecting "error" took
    onnxruntime 1.20's own Pad → MaxPool fusion error ("Pad should be smaller than kernel") of a model
    holding a Neg: any error was the entry's. Such an entry names its words (`says`), or is refused."""
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Pad", ["n", "p"], ["padded"], mode="constant"),
         helper.make_node("MaxPool", ["padded"], ["y"], kernel_shape=[1])], "pe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 6])],
        [onnx.numpy_helper.from_array(np.array([0, 0, 1, 0, 0, 1], np.int64), "p")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8), tmp_path / "pe.onnx")
    np.savez(tmp_path / "pe.npz", x=np.array([1, 2, 3, 4], np.float32).reshape(1, 1, 4))
    cases = tmp_path / "cases"
    cases.mkdir()
    entry = ('[[issue]]\nid = "neg"\ntitle = "t"\nfault = { op = "Neg" }\nengine = "onnxruntime"\nversions = ">=1.17"\n'
             'expected = "error"\nsource = "this test"\n')
    (cases / "known_issues.toml").write_text(entry)
    config = write_matrix(PROFILES + f'[cases.pe]\nonnx = "{tmp_path / "pe.onnx"}"\ninputs = "{tmp_path / "pe.npz"}"\n'
                          'profiles = ["fp32"]\n', environments=("ort-1.20",), cases_dir=cases)
    assert refused("plan", "-c", str(config)).endswith(
        "a `fault` entry expecting 'error' needs `says`: words of the engine's error that tell this fault's from any "
        "other error of a model holding the pattern")
    for says, status in (("some other words", "error"), ("Pad should be smaller than kernel", "xfail")):
        (cases / "known_issues.toml").write_text(entry + f'says = "{says}"\n')
        done = trtmatrix("run", "-c", str(config))
        cell = read_run(list_runs(tmp_path / "reports")[-1]).iloc[0]
        assert (cell["verdict"], cell["status"]) == ("error", status), (done.stderr, cell["error"])


def test_of_two_known_issues_matching_a_cell_the_one_it_meets_is_taken_and_said(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "known_issues.toml").write_text(
        ISSUE.format(id="it-crashes", case="tiny", versions=">=1.17", expected="crash")
        + ISSUE.format(id="too-far", case="tiny", versions=">=1.17", expected="fail"))
    config = write_matrix(PROFILES + tiny_case(model, inputs, ("fp32", "fp16")) + TIGHT_FP16, environments=(ENV,),
                          cases_dir=cases)
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 0, done.stderr
    cell = read_run(list_runs(tmp_path / "reports")[-1]).set_index("cell_id").loc[FP16]
    assert (cell["verdict"], cell["status"], cell["known_issue"]) == ("fail", "xfail", "too-far")
    assert "known issues it-crashes, too-far all match this cell; too-far is taken" in cell["reported"]
    assert f"warning: 1 cells match more than one known issue" in done.stderr
    assert f"{FP16} (it-crashes, too-far: too-far taken)" in done.stderr


# --- 6: outputs write through links, into FIFOs, and refuse what takes no file -------------------

def test_outputs_go_through_links_into_fifos_and_refuse_sockets(tiny, tmp_path):
    config, run_dir = tiny
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "release.md").write_text("old notes")
    link = tmp_path / "release.md"
    link.symlink_to(notes / "release.md")
    assert trtmatrix("summary", "-c", str(config), "-o", str(link)).returncode == 0
    assert link.is_symlink() and (notes / "release.md").read_text().startswith(f"## trtmatrix run `{run_dir.name}`")

    junit = tmp_path / "junit.xml"
    junit.symlink_to(notes / "junit.xml")  # a link to a file not made yet
    assert trtmatrix("run", "-c", str(config), "--junit-xml", str(junit)).returncode == 0
    assert junit.is_symlink() and ET.parse(notes / "junit.xml").getroot().tag == "testsuites"

    fifo = tmp_path / "fifo"  # a reader waits at the other end
    os.mkfifo(fifo)
    read = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()), daemon=True)
    reader.start()
    done = trtmatrix("summary", "-c", str(config), "-o", str(fifo), timeout=120)
    reader.join(30)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and read and read[0].startswith("## trtmatrix run `")

    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "s.sock"))
    try:
        assert refused("tolerances", "suggest", "-c", str(config), "--trusted", ENV, "-o", str(tmp_path / "s.sock")) == (
            f"error: -o {tmp_path / 's.sock'}: {tmp_path / 's.sock'} is a socket: an output goes to a file, a FIFO or "
            "a character device")
    finally:
        server.close()


def test_an_output_that_fails_midway_is_named_as_given_and_leaves_no_temporary_file(tiny, tmp_path):
    config, _ = tiny
    out = tmp_path / "summary.md"
    done = trtmatrix("summary", "-c", str(config), "-o", str(out),  # the file system refuses more than 64 bytes
                     preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64)))
    assert done.returncode == 2 and done.stderr == f"error: --output {out}: File too large\n"
    assert not list(tmp_path.glob(".summary.md.*")) and not out.exists()


# --- 7: runs that end ------------------------------------------------------------------------------

def test_a_stopped_supervisor_cannot_hang_the_run(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    # The case's own 2 s under the run's 600 s: the host keeps each cell's own deadline (issue 41p).
    config = write_matrix(PROFILES + HANG + tiny_case(model, inputs, ("hang",)) + "timeout_s = 2\n",
                          environments=(ENV,), timeout_s=600)
    run = start("run", "-c", str(config))
    # The supervisor once its cell started; not `uv pip sync` making the venv, which has children too
    # (in a session whose first run of the environment is this one).
    supervisor = wait_for(lambda: next((pid for pid in children(run.pid) if children(pid)
                                        and "trtmatrix_worker" in command_line(pid)), None))
    os.kill(supervisor, signal.SIGSTOP)
    begun = time.monotonic()
    try:
        _, stderr = run.communicate(timeout=120)
    finally:  # the run that hung: nothing of it left for the next test
        for pid, kill in ((run.pid, os.killpg), (supervisor, os.kill)):
            if Path(f"/proc/{pid}").exists():
                kill(pid, signal.SIGKILL)
    assert run.returncode == 0, stderr
    assert time.monotonic() - begun < 60  # its timeout (2 s) + the supervisor's grace + a stop's grace
    cell = read_run(list_runs(tmp_path / "reports")[-1]).iloc[0]
    assert cell["status"] == "timeout" and cell["error"].startswith("not finished within 2s; its worker stopped answering")
    assert not Path(f"/proc/{supervisor}").exists()


STRAY = '''
import subprocess
import threading
import time

import torch

from matrix.case import case

threading.Thread(target=time.sleep, args=(3600,)).start()  # a thread that never ends, started at import


@case(params={"n": [2]})
def stray(n: int):
    """Leaves a thread and a process behind."""
    threading.Thread(target=time.sleep, args=(3600,)).start()
    subprocess.Popen(["sleep", "%s"])
    return torch.nn.Linear(n, n), {"x": torch.ones(1, n)}
'''


def test_threads_and_processes_a_case_file_leaves_keep_nothing_alive(tmp_path, write_matrix):
    marker = str(3000 + os.getpid() % 1000)  # the stray `sleep`'s argument: this test's own
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "stray.py").write_text(STRAY % marker)
    config = write_matrix('[profiles.fp32]\nprecision = "fp32"\n[cases.stray]\nprofiles = ["fp32"]\n',
                          cases_dir=cases, environments=(ENV,))
    run = start("run", "-c", str(config))
    try:
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 0, stderr
    assert read_run(list_runs(tmp_path / "reports")[-1]).iloc[0]["status"] == "pass"
    assert processes_with(f"sleep {marker}") == []


def test_a_stop_while_a_case_file_is_importing_is_128_plus_n_with_one_line(toy):
    cases, config = toy
    importing = cases.parent / "importing"
    (cases / "toy.py").write_text(f"open({str(importing)!r}, 'w').close()\nimport time\ntime.sleep(120)\n"
                                  + CASE_FILE % ("[1]", "toy"))
    for signum in (signal.SIGINT, signal.SIGTERM):
        importing.unlink(missing_ok=True)
        plan = start("plan", "-c", str(config))
        wait_for(importing.exists, 60)
        os.kill(plan.pid, signum)
        _, stderr = plan.communicate(timeout=60)
        assert plan.returncode == 128 + signum and "Traceback" not in stderr
        # issue 41, second sweep, finding 28c: a command that runs no cell does not speak of cells to resume
        assert stderr.strip().splitlines() == [f"stopped by {signum.name}: nothing it was writing is left half-written"]


# --- 8: stops leave no litter and call no stopped cell an error ----------------------------------

def test_ctrl_c_calls_no_stopped_cell_an_error_and_leaves_no_lock(tmp_path, write_matrix, cache_dir):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + HANG + tiny_case(model, inputs, ("hang", "fp32")), environments=(ENV, OLD),
                          timeout_s=120)
    run = start("run", "-c", str(config))
    wait_for(lambda: [pid for pid in children(run.pid) if children(pid)])  # a cell runs in a worker
    os.killpg(run.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stderr
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("stopped by SIGINT") and "Traceback" not in stderr
    assert not [line for line in lines if re.search(r"\berror\b", line)], stderr
    assert not list((tmp_path / "reports" / "runs").glob(".*.lock"))
    assert wait_for(lambda: not processes_with(f"trtmatrix_worker run {cache_dir}"), 30)


def test_a_failed_or_stopped_prepare_leaves_no_temporary_artifacts(toy, cache_dir):
    cases, config = toy  # toy's build raises
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 0
    assert set(read_run(list_runs(config.parent / "reports")[-1])["status"]) == {"error"}
    assert not list((cache_dir / "artifacts").glob("toy-*.tmp"))

    building = cases.parent / "building"
    (cases / "toy.py").write_text(CASE_FILE.replace('raise AssertionError("not built in these tests")',
                                                    f"open({str(building)!r}, 'w').close()\n    import time\n"
                                                    "    time.sleep(120)") % ("[1]", "toy"))
    run = start("run", "-c", str(config))
    wait_for(building.exists)
    os.kill(run.pid, signal.SIGTERM)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 143 and stderr.strip().splitlines()[-1].startswith("stopped by SIGTERM")
    assert not list((cache_dir / "artifacts").glob("toy-*.tmp"))
    assert not list((config.parent / "reports" / "runs").glob(".*.lock"))


# --- 9: damaged stored files -----------------------------------------------------------------------

def _rewrite(run_dir: Path, change) -> Path:
    parquet = run_dir / "results.parquet"
    frame = pd.read_parquet(parquet)
    change(frame).to_parquet(parquet, index=False)
    return parquet


@pytest.mark.parametrize("change, said", [
    (lambda f: f.assign(infer_ms_runs="[0.1, oops"), "column 'infer_ms_runs' of cell 'tiny/fp32/ort-1.32': not JSON"),
    (lambda f: f.assign(status="weird"), "column 'status': unknown status 'weird' (cell 'tiny/fp32/ort-1.32'); statuses "
                                         "are pass, built, fail, error, crash, timeout, unsupported, skipped, xfail, xpass, "
                                         "disputed, no_reference"),
    (lambda f: pd.DataFrame({"a": [1, 2]}), "not a trtmatrix results table (no column 'cell_id')"),
])
def test_a_results_table_trtmatrix_did_not_write_is_named_and_left_out(tiny, change, said):
    config, run_dir = tiny
    parquet = _rewrite(run_dir, change)
    for command in (["diff", "--timing"], ["export", "--format", "csv"], ["report"]):
        line = refused(*command, run_dir.name, "-c", str(config))
        assert line == f"error: {parquet}: {said}, a damaged run?", command
    done = trtmatrix("run", "-c", str(config))  # a run after it reads it as the previous run: left out
    assert done.returncode == 0 and f"warning: {parquet}: {said}, a damaged run?; left out" in done.stderr
    history = trtmatrix("history", "-c", str(config))
    assert history.returncode == 0 and "left out" in history.stderr


def test_summaries_whose_content_is_wrong_under_a_kept_stamp_are_made_again(tiny):
    config, run_dir = tiny
    for name, wrong in (("history.json", [["tiny/fp32/ort-1.32"]]), ("summary.json", {"envs": 5})):
        stored = json.loads((run_dir / name).read_text())
        (run_dir / name).write_text(json.dumps({**stored, "content": wrong}))  # the stamp kept
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 0, done.stderr
    assert f"warning: {run_dir / 'history.json'}: not what trtmatrix writes there; made again" in done.stderr
    index = (run_dir.parent.parent / "index.html").read_text()
    assert all(f"runs/{r.name}/report.html" in index for r in list_runs(run_dir.parent.parent))


def test_a_cached_result_or_judgement_trtmatrix_did_not_write_never_reaches_a_run(tmp_path):
    model, inputs = make_tiny_model(tmp_path)
    cache = tmp_path / "cache"  # its own: the session's cache is shared by the other tests
    config = matrix_file(tmp_path, cache, PROFILES + tiny_case(model, inputs, ("fp32", "fp16")) + TIGHT_FP16,
                         environments=(ENV,))
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    first = read_run(list_runs(tmp_path / "reports")[-1]).set_index("cell_id")
    results = cache / "results" / ENV
    fp32 = next(results.glob(f"{first.loc['tiny/fp32/ort-1.32', 'content_key'][:24]}*/result.json"))
    fp32.write_text(json.dumps({**json.loads(fp32.read_text()), "status": "weird"}))
    fp16 = next(results.glob(f"{first.loc[FP16, 'content_key'][:24]}*/judgement-*.json"))
    fp16.write_text(json.dumps({"verdict": "pass", "fields": []}))
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr  # read back: never exit 2 or 3
    again = read_run(list_runs(tmp_path / "reports")[-1]).set_index("cell_id")
    assert again.loc["tiny/fp32/ort-1.32", "status"] == "error"
    assert again.loc["tiny/fp32/ort-1.32", "error"] == "its result says status 'weird', which trtmatrix does not know"
    assert again.loc[FP16, "status"] == "fail" and again.loc[FP16, "max_abs"] == first.loc[FP16, "max_abs"]  # judged again


def test_a_shard_whose_run_json_is_damaged_is_named_by_merge(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV, OLD))
    for shard in ("1/2", "2/2"):
        assert trtmatrix("run", "-c", str(config), "--shard", shard).returncode == 0
    first = list_runs(tmp_path / "reports")[0]
    meta = json.loads((first / "run.json").read_text())
    for key, value, said in (("shard", "x/2", "'x/2' is not I/N with 1 <= I <= N"), ("started", None, "missing"),
                             ("plan_key", None, "missing")):
        damaged = {**meta, key: value} if value else {k: v for k, v in meta.items() if k != key}
        (first / "run.json").write_text(json.dumps(damaged))
        line = refused("merge", *[r.name for r in list_runs(tmp_path / "reports")], "-c", str(config))
        assert line == f"error: {first / 'run.json'}: {key}: {said}, a damaged run?"


# --- 10: no quiet misreading of the command line --------------------------------------------------

def test_a_matrix_file_or_a_name_that_is_not_there_is_refused(tiny, tmp_path):
    config, run_dir = tiny
    typo = tmp_path / "typo.toml"
    for command in (["diff"], ["history"], ["summary"], ["export"], ["tolerances", "suggest", "--trusted", ENV]):
        assert refused(*command, "-c", str(typo)) == f"error: {typo}: file not found", command
    c = ["-c", str(config)]
    assert refused("history", *c, "--cell", "nothing*").startswith("error: --cell nothing*: matches no cell of the last")
    # issue 41, sweep 3 #20: an empty pattern was an empty table, exit 0
    assert refused("history", *c, "--cell", "").startswith("error: --cell '': an empty pattern matches no cell")
    assert refused("tolerances", "suggest", *c, "--trusted", ENV, "--case", "nothing") == \
        "error: --case nothing is not a case of the run (tiny)"
    assert refused("images", "list", "--images-dir", str(tmp_path / "none")) == \
        f"error: --images-dir {tmp_path / 'none'}: no such folder"
    (tmp_path / "empty").mkdir()
    empty = trtmatrix("images", "list", "--images-dir", str(tmp_path / "empty"))  # said; the shipped ones listed
    assert empty.returncode == 0 and "no environment definitions (*.toml) in it; those that ship with trtmatrix" \
        in empty.stderr and "ort-1.32" in empty.stdout
    assert refused("diff", *c, "--timing", "--from", "nothing").startswith("error: --from 'nothing' is not an environment")
    assert refused("diff", *c, "--from", ENV, "--to", ENV).startswith(f"error: --from and --to are both '{ENV}'")
    alone = trtmatrix("summary", *c, "--to", ENV)  # the other end: the nearest earlier version, never ENV itself
    assert alone.returncode == 0 and f"### Upgrade {OLD} → {ENV}" in alone.stdout
    assert refused("summary", *c, "--to", OLD).startswith(f"error: --to {OLD}: no other version of its engine before it")
    assert refused("run", *c, "--shard", "¹/²").startswith("error: --shard ¹/²: expected I/N")
    assert refused("tolerances", "suggest", *c, "--trusted", ENV, "--factor", "inf") == \
        "error: --factor inf: give a finite number, at least 1"
    assert refused("run", *c, "--ray", "").startswith("error: --ray: empty")
    assert refused("bisect", "tiny/fp32", "--good", "1.17.3", "--bad", "1.20.1", "--engine", "tflite", *c) == \
        "error: --engine 'tflite': one of onnxruntime, tensorrt, torch"


@pytest.mark.parametrize("setting, key", [
    ('ray_address = ""', "run.ray_address: empty: give a value"),
    ("ray_address = \"  \"", "run.ray_address: empty: give a value"),
])
def test_matrix_settings_that_say_nothing_are_refused(toy, setting, key):
    _, config = toy
    config.write_text(config.read_text().replace("[run]\n", f"[run]\n{setting}\n", 1))
    assert refused("plan", "-c", str(config)) == f"error: {config}: {key}"


def test_an_empty_keep_fp32_pattern_and_a_deeply_nested_array_are_refused(toy):
    _, config = toy
    text = config.read_text()
    config.write_text(text.replace('[profiles.fp16]\nprecision = "fp16"\n',
                                   '[profiles.fp16]\nprecision = "fp16"\nkeep_fp32 = [""]\n'))
    assert refused("plan", "-c", str(config)) == f"error: {config}: profiles.fp16.keep_fp32.0: empty: give a value"
    config.write_text(text + "deep = " + "[" * 2000 + "]" * 2000 + "\n")
    assert refused("plan", "-c", str(config)).startswith(f"error: {config}: not valid TOML here: nested too deeply")


def test_a_reports_folder_under_home_is_the_home_folder_s(tmp_path, write_matrix):
    model, inputs = make_tiny_model(tmp_path)
    config = write_matrix(PROFILES + tiny_case(model, inputs), environments=(ENV,))
    config.write_text(re.sub(r'reports_dir = "[^"]*"', 'reports_dir = "~/nightly"', config.read_text()))
    home = tmp_path / "home"
    home.mkdir()
    done = trtmatrix("run", "-c", str(config), env={"HOME": str(home)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert list_runs(home / "nightly") and not (tmp_path / "~").exists()


# --- 11: text that keeps its format ----------------------------------------------------------------

def odd_model(folder: Path, op_type: str, domain: str = "") -> tuple[Path, Path, Path]:
    """y = <op_type>(x): an op whose name holds an ESC, with its expected outputs given."""
    node = helper.make_node(op_type, ["x"], ["y"], name="odd", domain=domain)
    graph = helper.make_graph([node], "odd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    paths = folder / "odd.onnx", folder / "odd_in.npz", folder / "odd_out.npz"
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=8), paths[0])
    np.savez(paths[1], x=np.ones(2, np.float32))
    np.savez(paths[2], y=np.tanh(np.ones(2)))
    return paths


def test_control_characters_never_break_junit_xml_nor_an_error_line(tmp_path, write_matrix):
    model, inputs, expected = odd_model(tmp_path, "Odd\x1b[31m", domain="x.custom")
    case = f'[cases.odd]\nonnx = "{model}"\ninputs = "{inputs}"\nexpected = "{expected}"\nprofiles = ["fp32"]\n'
    config = write_matrix(PROFILES + case, environments=(ENV,))
    junit = tmp_path / "junit.xml"
    assert trtmatrix("run", "-c", str(config), "--junit-xml", str(junit)).returncode == 0
    said = [e.get("message") for e in ET.parse(junit).iter() if e.get("message")]  # an XML parser reads it
    assert said and "Odd\\x1b[31m" in said[0] and "\x1b" not in junit.read_text()

    model, inputs, expected = odd_model(tmp_path, "Tanh\x1b[31m")  # the ONNX checker refuses it at plan time
    line = refused("plan", "-c", str(config))
    assert "Tanh\\x1b[31m" in line and "\x1b" not in line


def test_a_link_base_is_one_link_address_in_markdown(tiny):
    config, _ = tiny
    base = "https://ci.example/run 7/report.html) [click](https://evil.example"
    done = trtmatrix("summary", "-c", str(config), "--link-base", base)
    assert done.returncode == 0, done.stderr
    addresses = re.findall(r"\]\(([^)]*)\)", done.stdout)
    assert addresses and all(a.startswith("https://ci.example/run%207/report.html%29%20") for a in addresses)
    assert "[click](https://evil.example" not in done.stdout
