"""The support matrix page (`trtmatrix support`): per release and ONNX operator, built / refused
(with the causes) / broke and the tests behind each, from a real run of ONNX node tests on
TensorRT-RTX 1.4 and 1.7; the published pages in docs/ are exactly what the command makes from the
runs kept in reports/examples/, and the suite figures quoted in docs/suites.md (and the README, where
it quotes them) are lines of those pages."""

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

from conftest import REPO, matrix_file
from matrix.store import list_runs, read_run

TESTS = ["test_abs", "test_add_int16", "test_add_int8", "test_cumprod_1d", "test_swish", "test_cast_FLOAT_to_BFLOAT16"]


def cli(*args, columns="250"):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": columns})


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory, cache_dir):
    home = tmp_path_factory.mktemp("support")
    body = ('[profiles.fp32]\nprecision = "fp32"\n[cases.node]\nsuite = "onnx-backend-node"\nprofiles = ["fp32"]\n'
            f"include = {json.dumps(TESTS)}\n")
    config = matrix_file(home, cache_dir, body, environments=("trt-rtx-1.4", "trt-rtx-1.7"))
    done = cli("run", "-c", str(config))
    assert done.returncode == 0, done.stderr[-2000:]
    return config, read_run(list_runs(home / "reports")[-1])


def test_the_page_says_per_release_and_operator_what_built_and_why_the_rest_did_not(suite_run):
    config, frame = suite_run
    done = cli("support", "-c", str(config))
    assert done.returncode == 0, done.stderr
    page = done.stdout
    assert f"Made by `trtmatrix support -c {config} > docs/matrix-support.md`" in page
    for env, cells in frame.groupby("env"):
        counts = Counter(cells["status"])
        assert f"{counts['built']} of {len(cells)} tests built" in next(l for l in page.splitlines() if l.startswith(f"- {env} ("))
    status = frame.set_index(["row_id", "env"])["status"]
    assert status[("node/test=test_cast_FLOAT_to_BFLOAT16/fp32", "trt-rtx-1.7")] == "built"  # a type numpy lacks, built
    # 1.4 → 1.7: Swish (no importer in 1.4) and INT8 Add (1.4's builder refuses it) now build: gains, said as one.
    assert "- trt-rtx-1.4 → trt-rtx-1.7: gained 2 (newly supported 2); lost 0" in page
    add = next(l for l in page.splitlines() if l.startswith("| [Add](#add) | 2 |"))
    assert add == "| [Add](#add) | 2 | 0 of 2 built (refused 2) | 1 of 2 built (refused 1) |"
    cumprod = page.split("### CumProd")[1].split("###")[0]
    assert "| test\\_cumprod\\_1d | refused [1] | refused [1] |" in cumprod  # one cause in both releases' words
    assert "1. refused by the parser: CumProd (operator not supported)" in cumprod
    adds = page.split("### Add")[1].split("###")[0]
    assert "refused by the builder: an INT8 tensor without a DQ node (cannot be quantized)" in adds
    assert "refused by the parser: an input of type int16 (UNSUPPORTED\\_NODE)" in adds


def test_two_builds_are_not_unchanged_and_the_gain_is_one_number(suite_run):
    config, _ = suite_run
    shown = cli("diff", "-c", str(config), "--from", "trt-rtx-1.4", "--to", "trt-rtx-1.7", columns="80")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "trt-rtx-1.4 → trt-rtx-1.7: gained 2 (newly supported 2); lost 0"
    assert "built in both; not run (2):" in lines and "unchanged (2):" in lines  # abs and the BF16 cast; int16, CumProd
    built_both = lines[lines.index("built in both; not run (2):") + 1]
    assert built_both.endswith(": built → built")
    summary = cli("summary", "-c", str(config), "--from", "trt-rtx-1.4", "--to", "trt-rtx-1.7")
    assert "Gained 2 (newly supported 2); lost 0." in summary.stdout and "2 built in both; not run" in summary.stdout


@pytest.mark.parametrize("matrix", ["trt-rtx-suite", "onnx-suite"])
def test_the_published_page_is_what_the_command_makes_and_the_docs_quote_it(matrix):
    """docs/<matrix>-support.md is `trtmatrix support` of the run kept in reports/examples/<matrix>/
    (its results reduced to the columns the page reads): never edited by hand. The figures for that
    suite, under a marker naming the command, are lines of the page: in docs/suites.md, and in every
    other page (the README, docs/*.md) that quotes them."""
    example = REPO / "reports" / "examples" / matrix
    made = cli("support", str(example), "-c", f"matrices/{matrix}.toml")
    assert made.returncode == 0, made.stderr
    page = (REPO / "docs" / f"{matrix}-support.md").read_text()
    assert made.stdout == page
    command = f"trtmatrix support -c matrices/{matrix}.toml > docs/{matrix}-support.md"
    assert f"Made by `{command}`" in page
    marker = f"<!-- figures: {command} -->"
    quoting = [doc for doc in [REPO / "README.md", *(REPO / "docs").glob("*.md")] if marker in doc.read_text()]
    assert REPO / "docs" / "suites.md" in quoting
    for doc in quoting:
        block = doc.read_text().split(marker)[1].split("\n\n")[0]
        quoted = re.findall(r"^> (- .+)$", block, flags=re.M)
        assert len(quoted) >= 4 and all(line in page.splitlines() for line in quoted), doc.name
