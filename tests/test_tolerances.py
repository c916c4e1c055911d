"""`trtmatrix tolerances suggest` and `report --tolerances` on real onnxruntime versions: a
suggestion from the trusted versions makes every trusted cell pass and leaves the version that is
wrong (1.17.3's FP16 LayerNorm drift, known issue ort-layernorm-fp16-mem-pattern) red."""

import json
import os
import subprocess
import sys
import tomllib

from conftest import PROFILES, REPO, matrix_file, tiny_case
from matrix.store import list_runs, read_run

BODY = """\
[profiles.fp32]
precision = "fp32"
[profiles.fp16]
precision = "fp16"
[cases.mha_transformer_block]
profiles = ["fp32", "fp16"]
params = { batch = [1] }
[cases.mha_transformer_block.tolerances.fp16]
atol = 1e-5
rtol = 1e-3
"""
TRUSTED = ("ort-1.20", "ort-1.32")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "matrix.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})


def test_a_suggestion_from_trusted_versions_keeps_the_wrong_one_red(tmp_path, cache_dir):
    config = matrix_file(tmp_path, cache_dir, BODY, environments=("ort-1.17", *TRUSTED))
    assert cli("run", "-c", str(config)).returncode == 0
    run_dir = list_runs(tmp_path / "reports")[-1]
    before = read_run(run_dir).set_index("cell_id")
    assert set(before.loc[[f"mha_transformer_block/batch=1/fp16/{e}" for e in TRUSTED], "verdict"]) == {"fail"}

    suggested = tmp_path / "tolerances.toml"
    made = cli("tolerances", "suggest", "-c", str(config), *sum((["--trusted", e] for e in TRUSTED), []),
               "-o", str(suggested))
    assert made.returncode == 0, made.stderr
    entry = tomllib.loads(suggested.read_text())["cases"]["mha_transformer_block"]["tolerances"]["fp16"]
    trusted = before[before["env"].isin(TRUSTED) & (before["profile"] == "fp16")]
    assert entry["atol"] >= 2 * trusted["atol_needed"].max() and entry["rtol"] == 1e-3

    judged = cli("report", run_dir.name, "-c", str(config), "--tolerances", str(suggested))
    assert judged.returncode == 0, judged.stderr
    # How many verdicts the new tolerances turned is said (a stranger saw only the report's path).
    turned = (before["status"] == "fail") & before["env"].isin(TRUSTED) & (before["profile"] == "fp16")
    assert f"re-judged {len(before)} cells: " in judged.stderr and f"fail → pass {turned.sum()}" in judged.stderr
    # The run's verdicts are no longer its own: said in run.json and at the top of its report.
    rejudged = json.loads((run_dir / "run.json").read_text())["rejudged"]
    assert rejudged[-1]["tolerances"] == str(suggested) and rejudged[-1]["config"] == str(config)
    assert f"with <code>{config}</code> and <code>{suggested}</code>: these verdicts are not the run's own" in \
        (run_dir / "report.html").read_text()
    after = read_run(run_dir).set_index("cell_id")
    assert set(after.loc[after["env"].isin(TRUSTED), "verdict"]) == {"pass"}
    wrong = after.loc["mha_transformer_block/batch=1/fp16/ort-1.17"]
    assert wrong["verdict"] == "fail" and wrong["atol"] == entry["atol"]  # judged with the suggestion, still red


def test_nan_in_a_trusted_cell_gives_no_suggestion_and_bad_input_is_one_line(tmp_path, cache_dir, tiny_model):
    model, inputs = tiny_model
    body = PROFILES + '[profiles.nan]\ninject = "nan"\n' + tiny_case(model, inputs, ("fp32", "nan"))
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.32",))
    assert cli("run", "-c", str(config)).returncode == 0
    shown = cli("tolerances", "suggest", "-c", str(config), "--trusted", "ort-1.32")
    assert shown.returncode == 0, shown.stderr
    assert "# tiny / nan: no suggestion: NaN/Inf in a trusted cell (tiny/nan/ort-1.32" in shown.stdout
    assert "[cases.tiny.tolerances.fp32]" in shown.stdout

    unknown_env = cli("tolerances", "suggest", "-c", str(config), "--trusted", "ort-9")
    assert unknown_env.returncode == 2 and unknown_env.stderr.count("\n") == 1 and "ort-9" in unknown_env.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[cases.nope.tolerances.fp32]\natol = 1e-3\nrtol = 0.0\n")
    refused = cli("report", "-c", str(config), "--tolerances", str(bad))
    assert refused.returncode == 2 and "cases.nope" in refused.stderr and refused.stderr.count("\n") == 1
