"""User text is data, never terminal markup: names and descriptions with rich markup, control
characters and great length reach the terminal as the same text, through the real CLI."""

import os
import subprocess
import sys

from conftest import REPO

HOSTILE = "[/] [bold red]x [link=https://example.invalid]y \x1b[31mRED\x1b[0m " + "z" * 200


def test_images_list_prints_hostile_text_as_text(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    definition = (REPO / "images" / "ort-1.32.toml").read_text()
    source = HOSTILE.replace("\x1b", "\\u001b")  # TOML's escape for the ESC character
    lines = [line for line in definition.splitlines() if not line.startswith("source")]
    (images / "ort-x.toml").write_text("\n".join(lines) + f'\nsource = "{source}"\n')
    result = subprocess.run([sys.executable, "-m", "matrix.cli", "images", "list", "--images-dir", str(images)],
                            cwd=REPO, capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"})
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout  # never an escape sequence for the terminal
    shown = "".join(result.stdout.split())  # the table may fold long text over lines
    assert "".join(HOSTILE.replace("\x1b", "\\x1b").split()) in shown


def test_images_list_in_80_columns_is_a_block_per_definition_with_every_value_whole():
    """Seven columns at 80 broke every word over lines ('onnxrunt / ime'): a log reads blocks."""
    result = subprocess.run([sys.executable, "-m", "matrix.cli", "images", "list"], cwd=REPO, capture_output=True,
                            text=True, env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "┃" not in result.stdout and "ort-1.17-docker" in lines
    assert "  built from: images/Dockerfile.onnxruntime BASE=trtmatrix-test/python:3.11 ORT_SPEC=onnxruntime==1.17.3 " \
           "NUMPY_SPEC=numpy==1.26.4" in lines
    assert len([line for line in lines if not line.startswith(" ")]) == len(list((REPO / "images").glob("*.toml")))


def test_a_log_never_goes_quiet_while_artifacts_are_prepared_and_a_re_run_that_runs_nothing_says_nothing(
        capsys, monkeypatch):
    """A big run's log gets a line whenever QUIET seconds passed while artifacts are prepared (a
    log went three minutes without one); a small run's, a line per artifact that took a while; an
    environment whose every cell is reused prints no "set up" line, one that runs cells says how many."""
    from matrix.report import console as terminal
    from matrix.report.console import RunProgress

    clock = iter(range(0, 1000, 4))  # every look at the clock: 4 s later
    monkeypatch.setattr(terminal.time, "monotonic", lambda: next(clock))
    with RunProgress(total=400) as big:
        for batch in range(7):
            big({"event": "prepare", "case": "case", "params": {"batch": batch}})
            big({"event": "prepared", "case": "case", "params": {"batch": batch}, "seconds": 4.0, "of": 7})
    said = capsys.readouterr().err.splitlines()
    assert said and all(line.startswith("preparing artifacts: ") and line.endswith(" of at most 7 so far") for line in said)
    with RunProgress(total=3) as small:
        small({"event": "prepare", "case": "minilm", "params": {"batch": 4}})
        small({"event": "prepared", "case": "minilm", "params": {"batch": 4}, "seconds": 31.0, "of": 2})
        small({"event": "setup", "env": "ort-1.20"})
        small({"event": "ready", "env": "ort-1.20", "setup_s": 0.2, "to_run": 0, "reused": 3})
        small({"event": "setup", "env": "ort-1.32"})
        small({"event": "ready", "env": "ort-1.32", "setup_s": 12.3, "to_run": 2, "reused": 1})
    assert capsys.readouterr().err.splitlines() == [
        "prepare minilm batch=4", "prepared minilm batch=4 in 31.0 s", "ort-1.32: 2 cells to run, 1 reused (environment and its models ready in 12.3 s)"]


def test_a_log_says_which_artifact_it_still_waits_for(capsys, monkeypatch):
    """A stranger's cold run sat two minutes on one 'prepare' line while a case exported its model:
    a log says, every HEARTBEAT seconds, what it is still preparing, and stops once it is prepared."""
    import time

    from matrix.report.console import RunProgress

    monkeypatch.setattr(RunProgress, "HEARTBEAT", 0.6)
    with RunProgress(total=3) as small:
        small({"event": "prepare", "case": "reranker", "params": {"batch": 4}})
        time.sleep(1.6)
        small({"event": "prepared", "case": "reranker", "params": {"batch": 4}, "seconds": 1.6, "of": 1})
        waited = capsys.readouterr().err.splitlines()
        time.sleep(1.2)
    assert waited[0] == "prepare reranker batch=4"
    assert [line.split(" (")[0] for line in waited[1:]] == ["still preparing reranker batch=4"] * (len(waited) - 1) != []
    assert capsys.readouterr().err == ""  # prepared: nothing more to wait for
