"""Issue 41, fifth sweep: texts that must match their evidence (a computed NaN is not uninitialised
memory; an FP16 copy's distances are said from what they are measured against), a reference that
is slow is no engine error, and a run that waits for another run's lock says for whom, and not for
ever. Real `trtmatrix` processes, real onnxruntime venvs (the session's), each failed on main
fe191fd."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import PROFILES, matrix_file
from matrix.store import list_runs, read_run
from test_bad_values import TRTMATRIX
from test_nothing_silent_three import children, wait_for

T = TensorProto


def trtmatrix(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([TRTMATRIX, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "250"})


def save(folder: Path, name: str, nodes, inputs, outputs, initializers: dict, feeds: dict) -> str:
    """An ONNX-file case `name` (opset 17, IR 8: every release here loads it) and its TOML."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, folder / f"{name}.onnx")
    np.savez(folder / f"{name}_in.npz", **feeds)
    return f'[cases.{name}]\nonnx = "{folder / f"{name}.onnx"}"\ninputs = "{folder / f"{name}_in.npz"}"\n'


def accumulating_loop(folder: Path, name: str, trips: int, rate: float) -> str:
    """y = Loop(trips): acc = acc * rate + x, rate an outer initializer and x an outer input."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "r"], ["m"]), helper.make_node("Add", ["m", "x"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", T.INT64, []), helper.make_tensor_value_info("cond_in", T.BOOL, []),
         helper.make_tensor_value_info("acc_in", T.FLOAT, [3])],
        [helper.make_tensor_value_info("cond_out", T.BOOL, []), helper.make_tensor_value_info("acc_out", T.FLOAT, [3])])
    return save(folder, name, [helper.make_node("Loop", ["n", "c0", "a0"], ["y"], body=body)],
                [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])],
                {"n": np.array(trips, np.int64), "c0": np.array(True), "a0": np.zeros(3, np.float32),
                 "r": np.array(rate, np.float32)}, {"x": np.array([1.0, 3.3, -7.1], np.float32)})


@pytest.fixture(scope="module")
def texts(tmp_path_factory, cache_dir):
    """One run of both cases on onnxruntime 1.20.1 and 1.32.0: a BERT-style LayerNormalization over
    rows that are constant (1.20.1 computes a negative variance there: NaN), and the Loop whose FP16
    copy rounds its rate 1.0001 to 1."""
    home = tmp_path_factory.mktemp("texts")
    rng = np.random.default_rng(16)
    x = rng.standard_normal((1, 4, 384)).astype(np.float32)
    x[0, 2:] = np.float32(0.1)  # padding rows that repeat one embedding
    body = PROFILES + save(home, "ln12", [helper.make_node("LayerNormalization", ["x", "w", "b"], ["y"], axis=-1,
                                                           epsilon=1e-12)],
                           [("x", T.FLOAT, [1, 4, 384])], [("y", T.FLOAT, [1, 4, 384])],
                           {"w": rng.standard_normal(384).astype(np.float32), "b": np.zeros(384, np.float32)},
                           {"x": x}) + 'profiles = ["fp32"]\n'
    body += accumulating_loop(home, "loop_outer", 2000, 1.0001) + 'profiles = ["fp16"]\n'
    offset = (1e4 + np.random.default_rng(3).standard_normal((4, 64)) * 1e-2).astype(np.float32)  # sweep 7 N7
    body += save(home, "ln_offset", [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
                 [("x", T.FLOAT, [4, 64])], [("y", T.FLOAT, [4, 64])],
                 {"g": np.ones(64, np.float32), "b": np.zeros(64, np.float32)}, {"x": offset}) + 'profiles = ["fp32"]\n'
    body += score_threshold(home) + 'profiles = ["fp16"]\n'
    config = matrix_file(home, cache_dir, body, environments=("ort-1.20", "ort-1.32"))
    ran = trtmatrix("run", "-c", str(config), "--junit-xml", str(home / "junit.xml"))
    assert ran.returncode in (0, 1), ran.stderr
    return config, read_run(list_runs(home / "reports")[-1]).set_index("cell_id"), ran, home / "junit.xml"


def score_threshold(folder: Path) -> str:
    """y = NonZero(x * s > 0.5), s = 1.0002: the indices of the scores above a threshold, as a
    detector's post-processing keeps its boxes. The FP16 copy rounds s to 1, so 0.49995 falls
    below the threshold: the copy (and onnxruntime running it) keeps 2 indices where the model keeps 3."""
    return save(folder, "threshold", [helper.make_node("Mul", ["x", "s"], ["xs"]),
                                      helper.make_node("Greater", ["xs", "t"], ["m"]),
                                      helper.make_node("NonZero", ["m"], ["y"])],
                [("x", T.FLOAT, [4])], [("y", T.INT64, [1, "n"])],
                {"s": np.array(1.0002, np.float32), "t": np.array(0.5, np.float32)},
                {"x": np.array([0.9, 0.49995, 0.1, 0.7], np.float32)})


def junit_messages(path: Path) -> dict[str, str]:
    """{suite/test case: its failure's or error's message} of a JUnit file."""
    import xml.etree.ElementTree as ET

    return {f"{suite.get('name')}/{case.get('name')}": verdict.get("message")
            for suite in ET.parse(path).getroot() for case in suite for verdict in case}


def test_an_output_of_another_shape_is_a_fail_that_says_both_shapes(texts):
    """Issue 41, sweep 5 leftovers 1: an engine output of another shape than the reference was
    `error` "compare failed: ValueError: output 'y' has shape (2,), reference has (3,)" (README:
    error = the engine raised; it did not). It is a fail with no number (max_abs NaN, not a
    measure), the shapes said on the terminal, in JUnit, in the conversion's cause and in repro's."""
    config, cells, ran, junit = texts
    wrong = "y has shape (1, 2), the reference (1, 3)"
    for env in ("ort-1.20", "ort-1.32"):
        cell = cells.loc[f"threshold/fp16/{env}"]
        assert cell["status"] == "fail" and cell["wrong_shape"] == wrong and np.isnan(cell["max_abs"])
        assert cell["error"] == ("FP16 copy's rounding of its constants: in the copy alone y has shape (1, 2), the "
                                 "reference (1, 3); the engine is 0 from the copy in float64")
        assert junit_messages(junit)[f"{env}/threshold/fp16"].startswith(f"fail; {wrong} (atol 0.01")
    assert f"FAIL {wrong}" in ran.stdout + ran.stderr
    assert "compare failed" not in ran.stdout + ran.stderr and "nan" not in cells.loc["threshold/fp16/ort-1.32", "error"]
    said = trtmatrix("repro", "threshold/fp16/ort-1.32", "-c", str(config))  # no "nan from the original model"
    assert said.returncode == 2 and ("the FP16 copy evaluated in float64 has outputs of other shapes than the original "
                                     f"model evaluated in float64 ({wrong})") in said.stderr, said.stderr


def test_junit_says_a_nan_output_as_nan_not_max_abs_inf(texts):
    """Issue 41, sweep 5 leftovers 3: JUnit wrote "NaN×768 in the outputs (max_abs inf)" for
    LayerNormalization's NaN rows on onnxruntime 1.20.1; the terminal says NaN×768."""
    _, cells, ran, junit = texts
    message = junit_messages(junit)["ort-1.20/ln12/fp32"]
    assert message.startswith("fail; NaN×768 in the outputs (atol 0.0001"), message
    assert "max_abs inf" not in message


def test_a_deterministic_nan_is_reported_as_a_nan_not_as_uninitialised_memory(texts):
    """Issue 41, sweep 5 #6: onnxruntime 1.20.1's LayerNormalization gives NaN on constant rows, the
    same on every inference; repro's verified ISSUE.md called it "output not written (uninitialised
    memory)" and "the values leave float32's range", and repro.py said "max_abs inf"."""
    config, cells, _, _ = texts
    assert cells.loc["ln12/fp32/ort-1.20", "status"] == "fail" and cells.loc["ln12/fp32/ort-1.20", "nan_count"] == 768
    done = trtmatrix("repro", "ln12/fp32/ort-1.20", "-c", str(config), "--json")
    assert done.returncode == 0, done.stderr
    issue = (Path(json.loads(done.stdout)["folder"]) / "ISSUE.md").read_text()
    title = issue.split("**Title:** `")[1].split("`")[0]
    assert title.startswith("LayerNormalization(axis=-1, epsilon=1e-12): NaN where the reference is finite on "
                            "onnxruntime 1.20.1"), title
    assert "returns 768 NaN where the reference is finite (the same in each inference of the attached run of " \
           "repro.py and as many as in trtmatrix's run: deterministic)" in issue
    assert "WRONG: 768 NaN where expected is finite, max_abs" in issue  # repro.py's own line, in the attached run
    for never in ("uninitialised", "never wrote", "float32's range", "max_abs inf"):
        assert never not in issue, never


def test_a_nan_report_does_not_say_a_release_with_finite_outputs_still_fails(texts):
    """Issue 41, sweep 7 N7: LayerNormalization of 1e4 + noise: onnxruntime 1.20.1 gives NaN, 1.32.0
    finite outputs 0.04 off (what float32 holds). repro of the 1.20.1 cell titled its upstream report
    "… NaN … on onnxruntime 1.20.1 to 1.32.0 (CPU); still fails on 1.32.0": the NaN is gone there."""
    config, cells, _, _ = texts
    assert cells.loc["ln_offset/fp32/ort-1.20", "nan_count"] > 0
    newer = cells.loc["ln_offset/fp32/ort-1.32"]
    assert newer["status"] == "fail" and newer["nan_count"] == 0 and newer["max_abs"] < 1
    done = trtmatrix("repro", "ln_offset/fp32/ort-1.20", "-c", str(config), "--json")
    assert done.returncode == 0, done.stderr
    issue = (Path(json.loads(done.stdout)["folder"]) / "ISSUE.md").read_text()
    title = issue.split("**Title:** `")[1].split("`")[0]
    assert title.endswith("NaN where the reference is finite on onnxruntime 1.20.1 (CPU); finite on 1.32.0"), title
    assert "Gone in onnxruntime 1.32.0: its outputs are finite, though still outside the tolerance" in issue
    assert "still fails" not in issue


def test_an_fp16_copys_distances_are_said_from_what_they_are_measured_against(texts):
    """Issue 41, sweep 5 #7: the Loop's FP16 copy computed in its own types is 214 off the reference
    (as onnxruntime is) and 1.5e3 off the copy's own float64 evaluation; repro said "is already
    1.51e+03 off" and "onnxruntime 1.32.0 is 1.51e+03 off" as if from the reference, and the run's
    cause "the engine adds 1.51e+03" to an error the engine made smaller."""
    config, cells, _, _ = texts
    cell = cells.loc["loop_outer/fp16/ort-1.32"]
    assert cell["status"] == "fail" and 200 < cell["max_abs"] < 230 and cell["conversion_max_abs"] > 1400
    assert "the engine adds" not in cell["error"]
    assert f"the copy alone is off by {cell['conversion_max_abs']:.3g}; the engine is {cell['copy_max_abs']:.3g} " \
           "from the copy in float64" in cell["error"]
    said = trtmatrix("repro", "loop_outer/fp16/ort-1.32", "-c", str(config))
    assert said.returncode == 2, said.stderr
    assert "computed node by node in its own types (FP16) is already 1.51e+03 off the copy's float64 evaluation" \
           in said.stderr
    assert "onnxruntime 1.32.0 is 1.51e+03 off it, what FP16 can hold (from the reference, the cell's measure, " \
           "they are 214 and 214 off)" in said.stderr


def preparing(pid: int) -> bool:
    """Whether run `pid` has its prepare process (not a uv that resolves an environment first)."""
    for child in children(pid):
        try:
            if b"prepare_apart" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
        except OSError:  # gone meanwhile
            continue
    return False


def test_a_slow_reference_is_no_reference_and_a_stopped_runs_lock_is_waited_for_within_timeout_s(tmp_path, cache_dir):
    """Issue 41, sweep 5 #8 and #11, with two real runs of a Loop of two million trips (onnxruntime
    runs it in 2 s; its float64 evaluation takes far longer than timeout_s = 3):
    #11: run A is stopped (SIGSTOP) while it prepares it; run B waited for A's artifact lock without
    limit, saying "still preparing bigloop" with no child at work. B now says for whom it waits and
    gives up after its timeout_s.
    #8: A, continued, stops the float64 evaluation at its deadline: the cell was `error` "... never
    returned" with exit 0; it is `no_reference` (exit 1), saying to raise timeout_s."""
    body = PROFILES + accumulating_loop(tmp_path, "bigloop", 2_000_000, 0.5) + 'profiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.32",), timeout_s=3)
    first = subprocess.Popen([TRTMATRIX, "run", "-c", str(config), "--no-reuse"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: preparing(first.pid))  # the artifact's lock is held
        os.kill(first.pid, signal.SIGSTOP)
        began = time.monotonic()
        second = trtmatrix("run", "-c", str(config), "--no-reuse", timeout=60)
        waited = time.monotonic() - began
    finally:
        os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=120)
    holder = f"run pid {first.pid} which is preparing bigloop (its process is stopped"
    assert f"waiting for {holder}" in second.stderr, second.stderr
    assert "still preparing" not in second.stderr
    cell = read_run(Path(second.stdout.strip().splitlines()[-1])).iloc[0]
    # issue 41, sweep 6 #8: not run here (skipped), not a failure of this run's prepare (error)
    assert cell["status"] == "skipped" and cell["error"].startswith(
        f"not run: not prepared within 3 s (timeout_s, for each row): its artifacts' lock is held by {holder}")
    assert waited < 30, waited  # its own timeout_s, not run A's stop
    assert first.returncode == 1, err
    cell = read_run(Path(out.strip().splitlines()[-1])).iloc[0]
    assert cell["status"] == "no_reference", cell["error"]
    assert cell["error"] == ("not evaluated in float64 within timeout_s = 3 s (for each row): the model's float64 "
                             "evaluation (a Loop or Scan) was stopped, before any engine ran; raise timeout_s (the "
                             "[run] table)")
    assert "1 cell of case bigloop not judged, no reference: not evaluated in float64" in err


def test_a_run_folder_whose_path_holds_a_newline_is_still_stdouts_last_line(tmp_path, cache_dir):
    """Issue 41, sweep 5 (the leftovers of sweep 4: a folder with a newline in its name): `run`
    printed its folder raw, and "the run folder's path is stdout's last line" gave `tail -1` the
    part after the newline; it is quoted as bash's $'…', which `eval` reads back whole."""
    from conftest import make_tiny_model, tiny_case

    project = tmp_path / "night\nly 'jobs'"
    model, inputs = make_tiny_model(tmp_path)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs), environments=("ort-1.32",))
    config.write_text(config.read_text().replace(f'"{tmp_path / "reports"}"', json.dumps(str(project / "reports"))))
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("$'") and "\n" not in last, last
    folder = subprocess.run(["bash", "-c", 'eval "folder=$0"; printf %s "$folder"', last], capture_output=True,
                            text=True).stdout
    assert Path(folder) == list_runs(project / "reports")[-1], folder


# A process that takes an environment's lock as a run does, and stops itself holding it (Ctrl-Z).
HOLD = """import os, signal, sys
from pathlib import Path
from matrix.store.locks import held_for

with held_for(Path(sys.argv[1]), sys.argv[2], "running ort-1.32's cells", print):
    os.kill(os.getpid(), signal.SIGSTOP)
"""


def test_a_run_waits_for_an_environment_a_stopped_run_holds_no_longer_than_timeout_s(tmp_path, cache_dir):
    """Issue 41, sweep 5 #11, the environment's lock: a run whose environment another run held
    while stopped (SIGSTOP, Ctrl-Z) waited for it for ever, without a word. It says for whom, and
    once the holder has been stopped for longer than timeout_s its cells are `error` naming it.
    Issue 41, sweep 5 leftovers 4: explain, repro and bisect waited for it saying nothing; they say
    the line `run` says.
    Issue 41, sweep 6 #8: those cells were `error`, listed as "newly fail … pass → error" (exit 1):
    a nightly went red on cells that never ran. They are `skipped` (nothing measured), said in the
    one line a skipped cell that passed before gets, and the exit is 0 (1 under --strict).
    Issue 41, sweep 6 #6: a prepare killed with its run (kill -9) left `<cache>/artifacts/<case>-<key>.tmp/`
    for good where the case stayed prepared; the next run removes such a folder whose lock is free
    (made here as a killed prepare leaves it), not one whose prepare holds its lock (the holder)."""
    from conftest import make_tiny_model, tiny_case

    model, inputs = make_tiny_model(tmp_path)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs), environments=("ort-1.32",),
                         timeout_s=3)
    night = trtmatrix("run", "-c", str(config))
    assert night.returncode == 0, night.stderr
    dead, live = (cache_dir / "artifacts" / f"tiny-{key}.tmp" for key in ("dead000000000000", "live000000000000"))
    for partial in (dead, live):
        partial.mkdir()
        (partial / "model.onnx").write_bytes(b"half a model")
    holders = [subprocess.Popen([sys.executable, "-c", HOLD, str(cache_dir), name], stdout=subprocess.DEVNULL)
               for name in ("env-ort-1.32", f"artifact-{live.stem}")]
    holder = holders[0]
    try:
        for one in holders:
            wait_for(lambda: Path(f"/proc/{one.pid}/stat").read_text().rpartition(")")[2].split()[0] == "T")
        began = time.monotonic()
        done = trtmatrix("run", "-c", str(config), "--no-reuse", timeout=60)
        waited = time.monotonic() - began
        investigations = [subprocess.Popen([TRTMATRIX, *args, "-c", str(config)], stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True) for args in (  # all three wait at once
            ["explain", "tiny/fp32/ort-1.32"], ["repro", "tiny/fp32/ort-1.32"],
            ["bisect", "tiny/fp32", "--good", "1.20.1", "--bad", "1.32.0"])]
        said_by = [investigation.communicate(timeout=60)[1] for investigation in investigations]
    finally:
        for one in holders:
            one.kill()
            one.wait()
    assert not dead.exists() and (live / "model.onnx").is_file()
    shutil.rmtree(live)
    said = f"run pid {holder.pid} which is running ort-1.32's cells (its process is stopped"
    assert f"ort-1.32: waiting for {said}" in done.stderr, done.stderr
    for stderr in said_by:
        assert f"ort-1.32: waiting for {said}" in stderr, stderr
    # repro takes the cell the held environment left unrun for one not run, not the engine's failure
    assert "is skipped, not a failing cell" in said_by[1] and "(not run: environment ort-1.32 is held" in said_by[1], \
        said_by[1]
    assert done.returncode == 0 and "newly fail" not in done.stderr, done.stderr
    assert f"1 cell passed in run {Path(night.stdout.strip().splitlines()[-1]).name} and did not run now: " \
           f"tiny/fp32/ort-1.32 (skipped: not run: environment ort-1.32 is held by" in done.stderr, done.stderr
    cell = read_run(Path(done.stdout.strip().splitlines()[-1])).iloc[0]
    assert cell["status"] == "skipped" and cell["error"].startswith(
        f"not run: environment ort-1.32 is held by {said}"), cell["error"]
    assert "stopped for longer than timeout_s (3 s)" in cell["error"] and waited < 30, waited
