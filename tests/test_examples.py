"""Every walkthrough in examples/ runs as its README says, as Polygraphy's tests/test_examples.py
runs its examples: each ```bash block of examples/NN_name/README.md in order, in a fresh copy of
the folder, with this interpreter's bin folder (the repository's .venv) first on PATH; its exit
status, what it prints and the files it writes are checked against the README's markers (the
conventions are in examples/README.md). So a walkthrough cannot drift from what trtmatrix does.

The copy sits at <tmp>/examples/NN_name beside a link named `cases` (the repository's cases/), so
the matrix files' own relative paths (`../../cases`) hold unchanged; their cache is the user's,
which conftest points at this test session's (TRTMATRIX_CACHE_DIR), so the venvs the other tests
make are reused, not made again."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from conftest import REPO

EXAMPLES = REPO / "examples"
WALKTHROUGHS = sorted(p.parent for p in EXAMPLES.glob("[0-9][0-9]_*/README.md"))
SECTIONS = ("## Introduction", "## Running the example")
MARKER = re.compile(r"<!--\s*(expect|writes):\s*(.*?)\s*-->")
ELLIPSIS = "…"


@dataclass
class Block:
    """One ```bash block and what the README says of it."""
    line: int  # 1-based, in the README
    code: str
    exit_status: int = 0
    writes: list[str] = field(default_factory=list)
    prints: list[str] = field(default_factory=list)  # the ```text block after it


def blocks(readme: Path) -> list[Block]:
    """The README's ```bash blocks in order, with the markers before each and its output excerpt."""
    found: list[Block] = []
    pending: dict = {"writes": []}
    last = None  # the fence before this one, as long as it is a bash block
    for token in MarkdownIt("commonmark").parse(readme.read_text()):
        if token.type == "html_block":
            for key, value in MARKER.findall(token.content):
                if key == "expect":
                    exit_status = re.fullmatch(r"exit (\d+)", value)
                    assert exit_status, f"{readme}: <!-- expect: {value} -->: write `exit N`"
                    pending["exit_status"] = int(exit_status[1])
                else:
                    pending["writes"] += [p.strip() for p in value.split(",") if p.strip()]
        elif token.type == "fence":
            info = token.info.strip()
            if info == "bash":
                last = Block(token.map[0] + 1, token.content, **pending)
                found.append(last)
                pending = {"writes": []}
            elif info == "text" and last is not None and not last.prints:
                last.prints = [line for line in token.content.splitlines() if line.strip()]
                last = None
            else:
                last = None
    assert not pending.get("exit_status") and not pending["writes"], f"{readme}: a marker after the last bash block"
    return found


def _squeeze(text: str) -> str:
    return " ".join(text.split())


def missing_lines(excerpt: list[str], output: str) -> list[str]:
    """The excerpt's lines not found in the output, in order: each line is a part of one output
    line, spaces squeezed, `…` standing for any text; a line of only `…` skips lines."""
    lines, at, missing = [_squeeze(line) for line in output.splitlines()], 0, []
    for wanted in excerpt:
        pattern = _squeeze(wanted)
        if pattern == ELLIPSIS:
            continue
        regex = re.compile(".*?".join(re.escape(part) for part in pattern.split(ELLIPSIS)))
        hit = next((i for i in range(at, len(lines)) if regex.search(lines[i])), None)
        if hit is None:
            missing.append(wanted)
        else:
            at = hit + 1
    return missing


def _matches(path: str, pattern: str) -> bool:
    """A file the pattern names: the pattern itself, or under a folder it names (`reports/`)."""
    pattern = pattern.rstrip("/")
    return fnmatch.fnmatchcase(path, pattern) or any(
        fnmatch.fnmatchcase("/".join(path.split("/")[:n]), pattern) for n in range(1, path.count("/") + 1))


def files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def stage(example: Path, root: Path) -> Path:
    """A fresh copy of the example at <root>/examples/<name>, without what its README says it
    writes (a developer's earlier run of it), beside a link to the repository's cases."""
    written = [w for block in blocks(example / "README.md") for w in block.writes]
    copy = root / "examples" / example.name
    copy.mkdir(parents=True)
    for name in sorted(files(example)):
        if not any(_matches(name, pattern) for pattern in written):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(example / name, copy / name)
    if not (root / "cases").exists():
        (root / "cases").symlink_to(REPO / "cases")
    return copy


def run_walkthrough(folder: Path) -> list[str]:
    """Every bash block of the folder's README, in order, each in its own `bash -e -o pipefail`
    in the folder; what went against the README, one line each (empty: all as it says)."""
    readme = folder / "README.md"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "VIRTUAL_ENV": str(Path(sys.executable).parent.parent), "COLUMNS": "120"}
    before, problems, written = files(folder), [], []
    for block in blocks(readme):
        where = f"{readme.parent.name}/README.md:{block.line}"
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.code], cwd=folder, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
        if done.returncode != block.exit_status:
            problems.append(f"{where}: exit status {done.returncode}, the README says {block.exit_status}; "
                            f"output:\n{done.stdout[-3000:]}")
            break  # the next blocks build on this one
        if missing := missing_lines(block.prints, done.stdout):
            problems.append(f"{where}: not printed: {missing}; output:\n{done.stdout[-3000:]}")
        for pattern in block.writes:
            if not any(_matches(name, pattern) for name in files(folder) - before):
                problems.append(f"{where}: wrote nothing that matches {pattern!r}")
        written += block.writes
    else:
        unsaid = sorted(name for name in files(folder) - before if not any(_matches(name, w) for w in written))
        if unsaid:
            problems.append(f"{readme.parent.name}: files its README does not say it writes: {unsaid[:10]}")
    return problems


@pytest.mark.parametrize("example", WALKTHROUGHS, ids=[p.name for p in WALKTHROUGHS])
def test_the_walkthrough_runs_as_its_readme_says(example, tmp_path):
    text = (example / "README.md").read_text()
    assert all(section in text for section in SECTIONS), f"{example.name}/README.md needs the sections {SECTIONS}"
    assert blocks(example / "README.md"), f"{example.name}/README.md has no bash block"
    problems = run_walkthrough(stage(example, tmp_path))
    assert not problems, "\n".join(problems)


def test_the_index_links_every_walkthrough_and_there_are_five_or_more():
    index = (EXAMPLES / "README.md").read_text()
    assert len(WALKTHROUGHS) >= 5
    for example in WALKTHROUGHS:
        assert f"]({example.name}/README.md)" in index or f"]({example.name}/)" in index, example.name


def test_the_checker_catches_a_readme_that_says_what_does_not_happen(tmp_path):
    """The conventions hold both ways: each kind of untruth in a README is reported."""
    def problems(body: str) -> list[str]:
        folder = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / "README.md").write_text(body)
        return run_walkthrough(folder)

    truthful = ("<!-- writes: out/, a.txt -->\n```bash\nmkdir out && echo x > out/f && echo 'made   a.txt now' > a.txt"
                " && cat a.txt\n```\n\n```text\nmade … now\n```\n\n<!-- expect: exit 3 -->\n```bash\nexit 3\n```\n")
    assert problems(truthful) == []
    assert "exit status 0, the README says 3" in problems(truthful.replace("exit 3\n```", "true\n```"))[0]
    assert "exit status 1, the README says 0" in problems("```bash\nfalse\ntrue\n```\n")[0]  # set -e
    assert "not printed: ['made … later']" in problems(truthful.replace("made … now", "made … later"))[0]
    assert "wrote nothing that matches 'b.txt'" in problems(truthful.replace("a.txt -->", "a.txt, b.txt -->"))[0]
    assert "does not say it writes: ['a.txt']" in problems(truthful.replace(", a.txt -->", " -->"))[0]
    assert missing_lines(["x", ELLIPSIS, "z"], "z\nx\ny\nz") == [] and missing_lines(["z", "x"], "x\nz") == ["x"]
