"""Acceptance rules beside element-wise closeness: `cosine >=` and top-k agreement judge a case
(per profile), are shown on the cell, and are re-applied by `trtmatrix report`."""

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import PROFILES, REPO, tiny_case
from matrix.acceptance import top_agreement
from matrix.store import list_runs, read_run


def test_top_agreement_counts_rows_whose_reference_argmax_is_in_the_top_k():
    reference = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])
    output = np.array([[0.2, 0.7, 0.1], [0.4, 0.5, 0.1], [0.1, 0.2, 0.7]])  # row 1: argmax moved to column 1
    assert top_agreement(output, reference, 1) == pytest.approx(2 / 3)
    assert top_agreement(output, reference, 2) == 1.0  # the reference's 0 is the output's second largest
    output[2, 0] = np.nan
    assert top_agreement(output, reference, 2) == pytest.approx(2 / 3)  # a NaN row never agrees
    # ... unless the reference holds NaN there too (sweep 9 B1: a fully masked row's softmax)
    reference[2, 0], reference[1] = np.nan, np.nan
    output[1] = np.nan
    assert top_agreement(output, reference, 2) == top_agreement(output, reference, 1) == 1.0  # ranked on the rest
    # A score per item (last axis 1, a reranker): one row, the best item across the batch.
    scores = np.array([[0.1], [2.0], [0.3], [1.9]])
    assert top_agreement(scores[[0, 3, 2, 1]], scores, 1) == 0.0 and top_agreement(scores * 1.01, scores, 1) == 1.0


def cli(*args):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})


def test_a_rule_judges_the_case_is_shown_and_is_re_applied(write_matrix, tiny_model, tmp_path):
    model, inputs = tiny_model
    case = tiny_case(model, inputs, ("fp16", "nan")) + "[cases.tiny.tolerances.fp16]\natol = 1e-9\nrtol = 0.0\n"
    body = PROFILES + '[profiles.nan]\ninject = "nan"\n' + case

    def matrix(cosine: float):
        rule = f"[cases.tiny.accept.fp16]\ncosine = {cosine}\n[cases.tiny.accept.nan]\ncosine = -0.99\n"
        return write_matrix(body + rule, environments=("ort-1.32",))

    assert cli("run", "-c", str(matrix(0.999))).returncode == 0
    run_dir = list_runs(tmp_path / "reports")[-1]
    cells = read_run(run_dir).set_index("cell_id")
    fp16 = cells.loc["tiny/fp16/ort-1.32"]
    assert fp16["atol_needed"] > 1e-9  # element-wise it would fail ...
    assert (fp16["verdict"], fp16["rule"]) == ("pass", "cosine ≥ 0.999")  # ... the rule passes it
    assert 0.999 <= fp16["cosine"] < 1.0
    assert cells.loc["tiny/nan/ort-1.32", "verdict"] == "fail"  # an undefined cosine holds no rule, even ≥ -0.99
    assert "⚖" in (run_dir / "report.html").read_text()

    # Tightened past what FP16 gives and re-judged from the stored outputs: now it fails.
    assert cli("report", run_dir.name, "-c", str(matrix(float(np.nextafter(fp16["cosine"], 2))))).returncode == 0
    assert read_run(run_dir).set_index("cell_id").loc["tiny/fp16/ort-1.32", "verdict"] == "fail"

    refused = cli("plan", "-c", str(write_matrix(body + "[cases.tiny.accept.fp32]\ncosine = 0.9\n",
                                                 environments=("ort-1.32",))))
    assert refused.returncode == 2 and "cases.tiny.accept.fp32" in refused.stderr
    empty = cli("plan", "-c", str(write_matrix(body + "[cases.tiny.accept.fp16]\ntopk = 5\n", environments=("ort-1.32",))))
    assert empty.returncode == 2 and "give cosine and/or top1" in empty.stderr
