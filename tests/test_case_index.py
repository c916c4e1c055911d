"""A plan whose artifacts are prepared does not import its case files (torch and transformers take
seconds on a GPU host before any cell runs): what an unchanged file declares is kept by its
digest, and the file is imported again only to build a case, or once it changed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

from conftest import PROFILES
from test_bad_values import TRTMATRIX

CASE = '''
import pathlib
import torch
from matrix.case import Export, case

with open(pathlib.Path(__file__).with_suffix(".imports"), "a") as fh:  # each import leaves a line
    fh.write("imported\\n")


@case(params={"n": [2, 3]}, export=Export(dynamic_axes={"x": {0: "batch"}}))
def counted(n):
    """x * n."""
    class Times(torch.nn.Module):
        def forward(self, x):
            return x * %s
    return Times(), {"x": torch.ones(2, n)}
'''


def trtmatrix(*args):
    return subprocess.run([TRTMATRIX, *args], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})


def test_an_unchanged_case_file_is_imported_only_to_build_a_case(tmp_path, write_matrix, cache_dir):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "counted.py").write_text(CASE % "n")
    imports = cases / "counted.imports"
    config = write_matrix(PROFILES + '[cases.counted]\nprofiles = ["fp32"]\n', cases_dir=cases, environments=("ort-1.32",))
    first = trtmatrix("plan", "-c", str(config))
    assert first.returncode == 0 and imports.read_text().count("imported") == 1
    assert trtmatrix("run", "-c", str(config)).returncode == 0  # builds both cases: imported once to do so
    built = imports.read_text().count("imported")
    assert built == 2
    again = trtmatrix("plan", "-c", str(config))
    assert again.returncode == 0 and imports.read_text().count("imported") == built  # prepared: not imported
    # the same cells; their keys known once their case is prepared (the key holds its artifacts' digests)
    assert [line.split("\t")[::2] for line in again.stdout.splitlines()] == \
        [[line.split("\t")[0], "stored"] for line in first.stdout.splitlines()]
    assert {line.split("\t")[1] for line in first.stdout.splitlines()} == {"-"} != \
        {line.split("\t")[1] for line in again.stdout.splitlines()}
    rerun = trtmatrix("run", "-c", str(config))
    assert rerun.returncode == 0 and imports.read_text().count("imported") == built
    (cases / "counted.py").write_text(CASE % "(n + 1)")  # changed: imported again, and its cells run again
    changed = trtmatrix("plan", "-c", str(config))
    assert imports.read_text().count("imported") == built + 1 and "\tnew" in changed.stdout
    # issue 41, sweep 16 J25: the index's entry edited (a row dropped, the file's bytes the same) planned one
    # row of two, silently: imported again, both planned
    entry = cache_dir / "case-index" / f"{hashlib.sha256((cases / 'counted.py').read_bytes()).hexdigest()[:24]}.json"
    kept = json.loads(entry.read_text())
    kept["declared"][0]["params"]["n"] = [2]
    entry.write_text(json.dumps(kept))
    edited = trtmatrix("plan", "-c", str(config))
    assert imports.read_text().count("imported") == built + 2 and len(edited.stdout.splitlines()) == 2, edited.stdout


def test_a_host_that_writes_no_bytecode_gets_none_beside_its_packages_and_workers_start_from_trtmatrixs(
        tmp_path, write_matrix, tiny_model, cache_dir):
    """PYTHONDONTWRITEBYTECODE=1 (an H100 host was lent so) made every worker compile torch from
    source at each start; the worker's bytecode now goes to trtmatrix's own cache folder."""
    model, inputs = tiny_model
    config = write_matrix(PROFILES + f'[cases.tiny]\nonnx = "{model}"\ninputs = "{inputs}"\nprofiles = ["fp32"]\n',
                          environments=("ort-1.32",))
    done = subprocess.run([TRTMATRIX, "run", "-c", str(config), "--no-reuse"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr
    kept = list((cache_dir / "worker" / "pycache").rglob("*.pyc"))
    assert any("onnxruntime" in str(path) for path in kept) and any("trtmatrix_worker" in str(path) for path in kept)
