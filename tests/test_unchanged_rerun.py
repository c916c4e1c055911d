"""What the cache keeps so that an unchanged re-run is quick (issue 44, point 2), and when it lets
go of it: venv resolutions asked of the index, digests of large artifact files. Real uv, real
files, each step in a fresh process where a run would be one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import PROFILES, REPO, make_tiny_model, matrix_file, tiny_case
from matrix.store import list_runs, read_run
from matrix.store import hashing
from matrix.store.hashing import hash_files, hash_json, remembered_digests
from matrix.worker.files import file_digest


RESOLVE = """
import json, sys
from pathlib import Path
from matrix.environments.definitions import load_envdefs
from matrix.environments.resolve import resolve_env, resolved_together
repo, cache = Path(sys.argv[1]), Path(sys.argv[2])
[envdef] = load_envdefs(repo / "images", ("ort-1.32",), repo / "matrix.toml")
with resolved_together([envdef], cache):
    pass
print(json.dumps(resolve_env(envdef).lock))
"""


def test_a_venv_resolution_stands_for_ten_minutes_then_is_asked_again(tmp_path):
    """issue 44, point 2 (an unchanged re-run asks no index): the resolution a run got from the
    index is kept in the cache; the next run within KEPT_S takes it as kept (its lock here carries
    a mark the index would never give), a later one asks the index again and keeps the new answer.
    Each step is a fresh process, as each run is."""
    from matrix.environments.resolve import KEPT_S
    from matrix.store.cache import resolutions_folder

    def lock() -> str:
        done = subprocess.run([sys.executable, "-c", RESOLVE, str(REPO), str(tmp_path)], capture_output=True,
                              text=True, check=True)
        return json.loads(done.stdout)

    first = lock()
    assert "onnxruntime==1.32.0" in first
    [kept] = resolutions_folder(tmp_path).glob("*.json")
    stored = json.loads(kept.read_text())
    stored["resolution"]["lock"] += "marked==1\n"
    kept.write_text(json.dumps(stored))
    assert lock() == first + "marked==1\n"  # within KEPT_S: the kept one, no index asked
    stored["at"] -= KEPT_S + 1
    kept.write_text(json.dumps(stored))
    assert lock() == first  # older: asked again
    assert "marked" not in kept.read_text()


def test_a_remembered_digest_holds_while_the_file_is_the_same_file(tmp_path):
    """issue 44, point 2 (a re-run hashed the BGE reranker's gigabyte model twice; then read one memo
    per file of every artifact): the digests of an artifact's files are remembered together, each with
    its file's identity; the same file is not read again (the memo's digest, here marked, is
    returned), a rewritten one is hashed again, the others still taken from the memo."""
    model, inputs, memo = tmp_path / "model.onnx", tmp_path / "inputs.npz", tmp_path / "digests" / "artifact.json"
    model.write_bytes(b"first model" * 1000)
    inputs.write_bytes(b"inputs" * 100)
    sha256 = {name: both["sha256"] for name, both in remembered_digests([model, inputs], memo).items()}
    assert sha256 == {"model.onnx": hash_files([model]), "inputs.npz": hash_files([inputs])}
    assert remembered_digests([model, inputs], memo)["inputs.npz"]["file"] == file_digest(inputs)
    kept = json.loads(memo.read_text())
    for name in kept:
        kept[name]["sha256"] = "marked " + name
    memo.write_text(json.dumps(kept))
    hashing._SEEN.clear()  # what this process was told already: the next run is a new process
    assert remembered_digests([model, inputs], memo)["model.onnx"]["sha256"] == "marked model.onnx"  # not hashed again
    model.write_bytes(b"second model, longer" * 1000)
    again = remembered_digests([model, inputs], memo)
    assert again["model.onnx"] == {"sha256": hash_files([model]), "file": file_digest(model)}
    assert again["model.onnx"]["sha256"] != sha256["model.onnx"] and again["inputs.npz"]["sha256"] == "marked inputs.npz"


FAULT = """
[[issue]]
id = "{id}"
title = "a pattern of the tiny model's {op}"
fault = {{ op = "{op}" }}
engine = "onnxruntime"
versions = ">=1.0"
expected = "fail"
source = "this test"
"""


def test_fault_patterns_found_in_a_model_are_remembered_until_the_registry_or_the_file_changes(tmp_path, cache_dir):
    """issue 44, point 2 (an unchanged re-run of the default matrix loaded every model a cell ran,
    the BGE reranker's gigabyte ones included, to look for the registry's fault patterns: 5 of its
    10 s): what was found is remembered with the model file's identity, for the registry's patterns.
    Through `trtmatrix run`, every cell reused: a new pattern is looked for; the same file keeps the
    remembered answer (here marked, an id no pattern has); a rewritten file is looked at again."""
    cases = tmp_path / "cases"
    cases.mkdir()
    model, inputs = make_tiny_model(tmp_path)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs), environments=("ort-1.32",),
                         cases_dir=cases)

    def faults() -> list[str]:
        done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=REPO,
                              capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"})
        assert done.returncode == 0, done.stderr
        [row] = read_run(list_runs(tmp_path / "reports")[-1]).to_dict("records")
        return list(json.loads(row["faults"]))  # {id: the outputs it reaches}

    (cases / "known_issues.toml").write_text(FAULT.format(id="tanh-pattern", op="Tanh"))
    assert faults() == ["tanh-pattern"]
    (cases / "known_issues.toml").write_text(FAULT.format(id="add-pattern", op="Add"))
    assert faults() == ["add-pattern"]  # another registry: looked for again, though the cell is reused
    artifact = read_run(list_runs(tmp_path / "reports")[-1])["artifact"].iloc[0]
    [memo] = [m for m in (cache_dir / "faults").glob(f"{artifact}.model.onnx.*.json")
              if list(json.loads(m.read_text())["value"]) == ["add-pattern"]]
    kept = json.loads(memo.read_text())  # marked, sealed as trtmatrix seals it (an edit unsealed is asked again)
    memo.write_text(json.dumps({**kept, "value": ["marked"], "seal": hash_json([kept["identity"], ["marked"]])}))
    assert faults() == ["marked"]  # the same file: not loaded again
    ran = cache_dir / "artifacts" / artifact / "model.onnx"
    ran.write_bytes(ran.read_bytes())  # the same bytes, another file
    assert faults() == ["add-pattern"]


def test_an_unchanged_rerun_lists_the_digests_of_the_files_it_stored_without_reading_them_again(tmp_path, cache_dir):
    """issue 44, point 2 (a cached re-run hashed every array its run folder links, though it had just
    checked the cells' outputs against their results' digests and had the artifacts' digests in its
    memo): through `trtmatrix run` twice, the second run's digests.json still lists every array of
    its cells/ and refs/, each with the digest of its own bytes (the two cells' outputs differ, as do
    the reference and the inputs: a digest listed under another file's name is caught)."""
    from matrix.worker.files import file_digest

    model, inputs = make_tiny_model(tmp_path)
    config = matrix_file(tmp_path, cache_dir, PROFILES + tiny_case(model, inputs, ("fp32", "fp16")),
                         environments=("ort-1.32",))

    def run() -> Path:
        done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=REPO,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return list_runs(tmp_path / "reports")[-1]

    run()
    second = run()
    assert read_run(second)["reused"].all()
    listed = json.loads((second / "digests.json").read_text())
    arrays = sorted(str(p.relative_to(second)) for kind in ("cells", "refs") for p in (second / kind).glob("*.npz"))
    assert sorted(listed) == arrays and len(arrays) == 2 + 2  # each cell's outputs; reference and inputs
    assert {name: file_digest(second / name) for name in arrays} == listed
    assert len(set(listed.values())) == len(listed)
