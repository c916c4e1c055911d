"""Issue 44, point 3 (CI on throwaway runners): an ephemeral CI job starts with an empty reports
folder, so "the previous run" is not there. `--baseline PATH` (the last nightly's run, unpacked
from an artifact) gives exit 1 on a regression; `--strict` exits 1 on any failure no known issue
covers. Through the real command line, real onnxruntime (conftest's session cache of venvs), a
tolerance tightened between nights as the regression (the same outputs pass, then fail)."""

import shutil

from conftest import BF16, make_tiny_model, matrix_file, tiny_case
from matrix.store import list_runs, read_run
from test_reports_cli import CELL, KNOWN_FP16, cli, project  # noqa: F401 - the fixture



def _fresh_runner(tmp_path):
    """What a new CI runner has: a checkout, no reports folder."""
    shutil.rmtree(tmp_path / "reports", ignore_errors=True)


def test_an_ephemeral_job_exits_1_on_a_regression_against_a_baseline_unpacked_from_elsewhere(project, tmp_path):
    night = cli("run", "-c", str(project(fp16_atol=1e-2)))
    assert night.returncode == 0, night.stderr
    # Last night's job uploaded its reports folder; tonight's job unpacks it somewhere of its own.
    artifact = shutil.copytree(tmp_path / "reports", tmp_path / "downloads" / "nightly-report")
    _fresh_runner(tmp_path)

    tonight = project(fp16_atol=1e-9)  # the cell fails tonight
    blind = cli("run", "-c", str(tonight))
    assert blind.returncode == 0, "without a baseline a fresh runner has nothing to compare with: the gap"
    _fresh_runner(tmp_path)

    gated = cli("run", "-c", str(tonight), "--baseline", str(tmp_path / "downloads"))
    assert gated.returncode == 1, gated.stderr
    baseline = list_runs(artifact)[-1]
    assert f"compared with the baseline run {baseline}" in gated.stderr
    assert f"{CELL}: pass → fail" in gated.stderr
    assert read_run(list_runs(tmp_path / "reports")[-1]).set_index("cell_id").loc[CELL, "status"] == "fail"

    # The run folder itself is a baseline too; a cell failing in both is no regression.
    _fresh_runner(tmp_path)
    passing_night = shutil.copytree(list_runs(tmp_path / "downloads" / "nightly-report")[-1], tmp_path / "last")
    assert cli("run", "-c", str(tonight), "--baseline", str(passing_night)).returncode == 1
    again = list_runs(tmp_path / "reports")[-1]
    assert cli("run", "-c", str(tonight), "--baseline", str(again)).returncode == 0, "fail → fail is not new"


def test_strict_exits_1_on_any_failure_no_known_issue_covers_even_on_a_first_run(project, tmp_path):
    config = project(fp16_atol=1e-9)
    strict = cli("run", "-c", str(config), "--strict")
    assert strict.returncode == 1, strict.stderr
    assert "1 cell fail, err, crash or time out outside any known issue (--strict):" in strict.stderr
    assert f"FAIL {CELL}" in strict.stderr
    _fresh_runner(tmp_path)

    covered = cli("run", "-c", str(project(fp16_atol=1e-9, registry=KNOWN_FP16)), "--strict")
    assert covered.returncode == 0, covered.stderr
    assert read_run(list_runs(tmp_path / "reports")[-1]).set_index("cell_id").loc[CELL, "status"] == "xfail"
    # issue 44, small things: the terminal names the known issue of an xfail cell
    assert f"known issue ort-fp16-tiny: 1 xfail ({CELL.rsplit('/', 1)[0]} on ort-1.32)" in covered.stderr


def test_a_merge_job_takes_the_baseline_and_strict_too(project, tmp_path):
    assert cli("run", "-c", str(project(fp16_atol=1e-2))).returncode == 0
    shutil.copytree(tmp_path / "reports", tmp_path / "downloads" / "nightly-report")
    _fresh_runner(tmp_path)
    tonight = project(fp16_atol=1e-9)
    for shard in ("1/2", "2/2"):
        assert cli("run", "-c", str(tonight), "--shard", shard).returncode == 0
    shards = [str(run) for run in list_runs(tmp_path / "reports")]
    merged = cli("merge", "-c", str(tonight), *shards, "--baseline", str(tmp_path / "downloads"))
    assert merged.returncode == 1 and f"{CELL}: pass → fail" in merged.stderr, merged.stderr


def test_a_baseline_that_holds_no_whole_run_is_refused_before_anything_runs(project, tmp_path):
    config = project(fp16_atol=1e-2)
    (tmp_path / "empty").mkdir()
    nothing = cli("run", "-c", str(config), "--baseline", str(tmp_path / "empty"))
    assert nothing.returncode == 2 and "--baseline" in nothing.stderr and "no run folder" in nothing.stderr
    assert not list_runs(tmp_path / "reports")

    assert cli("run", "-c", str(config), "--shard", "1/2").returncode == 0
    shard = shutil.copytree(list_runs(tmp_path / "reports")[-1], tmp_path / "shards" / "one")
    only_shards = cli("run", "-c", str(config), "--baseline", str(shard.parent))
    assert only_shards.returncode == 2 and "only shards (1): merge them" in only_shards.stderr

    # issue 41, sweep 5 #5: a baseline whose run holds none of this run's cells would let every
    # regression through saying it compared: refused before anything runs; one holding a part: said.
    shutil.rmtree(tmp_path / "reports")
    assert cli("run", "-c", str(config), "--cell", "tiny/fp32/ort-1.32").returncode == 0
    other = shutil.copytree(list_runs(tmp_path / "reports")[-1], tmp_path / "other" / "fp32-only")
    none = cli("run", "-c", str(config), "--cell", CELL, "--baseline", str(other))
    assert none.returncode == 2, none.stderr
    assert "that run holds none of this run's 1 cells" in none.stderr and len(list_runs(tmp_path / "reports")) == 1
    part = cli("run", "-c", str(config), "--baseline", str(other))
    assert part.returncode == 0, part.stderr
    assert f"holds 1 of this run's 2 cells; 1 are compared with nothing: {CELL}" in part.stderr


def test_a_run_that_tests_nothing_says_so_and_strict_exits_1(tmp_path, cache_dir):
    """Issue 41, sweep 18 L18: a matrix whose only profile onnxruntime cannot run (bf16) skipped every
    cell and exited 0 under --strict, the CI switch, with no line saying nothing was compared."""
    model, inputs = make_tiny_model(tmp_path)
    config = matrix_file(tmp_path, cache_dir, BF16 + tiny_case(model, inputs, profiles=("bf16",)), environments=("ort-1.32",))
    plain, strict = cli("run", "-c", str(config)), cli("run", "-c", str(config), "--strict")
    assert plain.returncode == 0 and "nothing was tested: no cell of this run got a verdict" in plain.stderr, plain.stderr
    assert strict.returncode == 1 and "(--strict: exit 1)" in strict.stderr, strict.stderr
