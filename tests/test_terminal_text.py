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


def test_a_big_run_in_a_log_says_how_many_artifacts_it_prepared(capsys):
    """Above 300 cells a log gets a line per 500 prepared artifacts: the count once they are all
    prepared, so that a run of seven does not end its preparation at "1 so far"."""
    from matrix.report.console import RunProgress

    with RunProgress(total=400) as progress:
        for batch in range(7):
            progress({"event": "prepare", "case": "case", "params": {"batch": batch}})
        progress({"event": "setup", "env": "ort-1.32"})
        progress({"event": "setup", "env": "ort-1.20"})
    assert capsys.readouterr().err.splitlines() == [
        "preparing artifacts: 1 so far", "prepared 7 artifacts", "set up ort-1.32", "set up ort-1.20"]
