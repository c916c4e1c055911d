"""`trtmatrix precision` on real onnxruntime versions: the profile it prints, pasted into a matrix
file, makes the failing FP16 cell pass in an ordinary run; a cell that fails with every node in
FP32 is said not to be a precision problem; the search itself finds a known minimal set."""

import json
import math
import shlex
import tomllib
import os
import subprocess
import sys

import pytest

from conftest import REPO, matrix_file
from matrix.investigations.precision import ddmin
from matrix.report.investigation_text import fixes_to_paste
from matrix.store import list_runs, read_run

CELL = "mha_transformer_block/batch=1/fp16/ort-1.17"  # known issue ort-layernorm-fp16-mem-pattern
BODY = """\
[profiles.fp16]
precision = "fp16"
[profiles.fp32]
precision = "fp32"
[cases.mha_transformer_block]
profiles = ["fp16"]
params = { batch = [1] }
[cases.ort_clip_fp16_min_only]
profiles = ["fp16", "fp32"]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory, cache_dir):
    home = tmp_path_factory.mktemp("precision")
    return matrix_file(home, cache_dir, BODY, environments=("ort-1.17", "ort-1.19.0")), home


def precision(config, cell):
    result = subprocess.run([sys.executable, "-m", "matrix.cli", "precision", cell, "-c", str(config), "--json"],
                            cwd=REPO, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    return result, (json.loads(result.stdout) if result.returncode == 0 else None)


def test_ddmin_finds_the_one_minimal_passing_set_in_logarithmic_rounds():
    for n in (8, 32, 128):
        items, rounds, wanted = [f"n{i}" for i in range(n)], [], {"n3", f"n{n // 2 + 1}"}

        def passes(candidates):
            rounds.append(candidates)
            return [wanted <= set(c) for c in candidates]

        assert set(ddmin(items, passes)) == wanted
        assert len(rounds) <= 2 * len(wanted) * math.log2(n)  # each round is one environment job


def test_the_printed_profile_makes_the_failing_fp16_cell_pass(project):
    config, home = project
    result, found = precision(config, CELL)
    assert result.returncode == 0, result.stderr
    kept = found["keep_fp32"]
    assert 1 <= len(kept) <= 3 and found["trials"] >= 2
    assert found["profile"] == {"precision": "fp16", "optimization": "on", "keep_fp32": kept}
    # Pasted into a matrix file beside the original profile, run afresh: the original fails, the fix passes.
    fixed = matrix_file(home, home / "fresh-cache", BODY.replace('profiles = ["fp16"]', 'profiles = ["fp16", "fixed"]')
                        + "[profiles.fixed]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in found["profile"].items()),
                        environments=("ort-1.17",), name="fixed.toml")
    subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(fixed), "--case", "mha_transformer_block"],
                   cwd=REPO, capture_output=True, check=False)
    verdicts = read_run(list_runs(home / "reports")[-1]).set_index("cell_id")["verdict"]
    assert verdicts[CELL] == "fail"
    assert verdicts[CELL.replace("/fp16/", "/fixed/")] == "pass"


def test_a_kernel_bug_is_not_a_precision_problem_and_an_fp32_cell_is_refused(project):
    config, _ = project
    # The model casts to FP16 itself: with every node held in FP32, 1.19.0's Clip kernel still fails.
    result, found = precision(config, "ort_clip_fp16_min_only/fp16/ort-1.19.0")
    assert result.returncode == 0, result.stderr
    assert found["profile"] is None and found["trials"] == 1
    result, _ = precision(config, "ort_clip_fp16_min_only/fp32/ort-1.19.0")
    assert result.returncode == 2 and result.stderr.startswith("error:") and "FP32 cell" in result.stderr


def test_the_fix_is_printed_as_a_profile_trtexec_flags_and_polygraphy_options():
    text = fixes_to_paste("fp16-fix", {"precision": "fp16", "keep_fp32": ["/norms.0/LayerNormalization", "/a b"]})
    profile = tomllib.loads(text.split("\n\n")[0].split("\n", 1)[1])
    assert profile["profiles"]["fp16-fix"]["keep_fp32"] == ["/norms.0/LayerNormalization", "/a b"]
    trtexec = next(line for line in text.splitlines() if line.startswith("trtexec "))
    assert shlex.split(trtexec)[3:] == ["--precisionConstraints=obey",
                                        "--layerPrecisions=/norms.0/LayerNormalization:fp32,/a b:fp32",
                                        "--layerOutputTypes=/norms.0/LayerNormalization:fp32,/a b:fp32"]
    polygraphy = next(line for line in text.splitlines() if line.startswith("polygraphy "))
    assert shlex.split(polygraphy)[-3:] == ["--layer-precisions", "/norms.0/LayerNormalization:float32", "/a b:float32"]
