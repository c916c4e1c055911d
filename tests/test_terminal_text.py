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
