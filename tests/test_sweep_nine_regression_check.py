"""Issue 41, ninth sweep B4: the regression check compares verdicts judged with the same files. A run
re-judged with `report --tolerances F` (a what-if) was the next run's "previous run": judged with the
matrix file's own tolerances again, the next run said "1 cell newly fails … pass → fail" and exited 1
with nothing changed but the tolerance file. Real `trtmatrix run`/`report` processes on the session's
onnxruntime 1.32; failed on main 4c534c5. Issue 41, tenth sweep C6: the same through the matrix file
itself, re-judged while edited and then edited back; failed on 17e23d9."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto as T, helper

from conftest import PROFILES, matrix_file
from test_sweep_five_texts_and_waits import save, trtmatrix


def near_case(folder: Path) -> str:
    """A Relu whose expected file is 0.3 off: it fails at the case's atol 0.1, passes at atol 1."""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    body = save(folder, "near", [helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, [3])], [("y", T.FLOAT, [3])],
                {}, {"x": x})
    np.savez(folder / "near_expected.npz", y=x + 0.3)
    return body + (f'profiles = ["fp32"]\nexpected = "{folder / "near_expected.npz"}"\n'
                   '[cases.near.tolerances.fp32]\natol = 0.1\nrtol = 0.0\n')


def test_a_run_re_judged_with_a_tolerance_file_is_not_the_previous_run(tmp_path, cache_dir):
    """issue 41, sweep 9 B4: a Relu whose expected file is 0.3 off fails at the matrix's atol 0.1 and
    passes under loose.toml's atol 1. A run re-judged with loose.toml is passed over, said in one
    line, for the run before it (exit 0: fail → fail) or for none; one re-judged again with the matrix
    file alone is compared with as it is; an explicit --baseline re-judged with loose.toml is used, and said so.
    Issue 41, sweep 10 C6: a run re-judged with the matrix file while it held atol 1 (edited back since) is
    passed over too: its digest, not its path, tells the content apart."""
    config = matrix_file(tmp_path, cache_dir, PROFILES + near_case(tmp_path), environments=("ort-1.32",))
    loose = tmp_path / "loose.toml"
    loose.write_text("[cases.near.tolerances.fp32]\natol = 1.0\nrtol = 0.0\n")

    def run(*args) -> tuple[Path, str]:
        done = trtmatrix("run", "-c", str(config), *args)
        assert done.returncode in (0, 1), done.stderr
        return Path(done.stdout.strip().splitlines()[-1]), done

    first, _ = run()
    assert trtmatrix("report", first.name, "-c", str(config), "--tolerances", str(loose)).returncode == 0
    second, done = run()
    said = (f"run {first.name} was re-judged with {loose.resolve()} (trtmatrix report): its verdicts are not "
            "this matrix file's; no earlier run to compare with\n")
    assert done.returncode == 0 and said in done.stderr and "newly fail" not in done.stderr, done.stderr
    assert "no earlier run holds" not in done.stderr, done.stderr  # said once, above

    # Re-judged with the matrix file itself: the same judgement, compared with as it is.
    assert trtmatrix("report", first.name, "-c", str(config)).returncode == 0
    assert trtmatrix("report", second.name, "-c", str(config), "--tolerances", str(loose)).returncode == 0
    third, done = run()
    said = (f"run {second.name} was re-judged with {loose.resolve()} (trtmatrix report): its verdicts are not "
            f"this matrix file's; compared with run {first.name} instead\n")
    assert done.returncode == 0 and said in done.stderr and "newly fail" not in done.stderr, done.stderr

    # The user's own --baseline is used as it is (pass there, fail now: exit 1), and said to be loose.toml's.
    fourth, done = run("--baseline", str(second))
    assert done.returncode == 1 and "near/fp32/ort-1.32: pass → fail" in done.stderr, done.stderr
    assert (f"compared with the baseline run {second}, re-judged with {loose.resolve()} (trtmatrix report): its "
            "verdicts are that file's, not this matrix file's\n") in done.stderr, done.stderr

    # Re-judged with the matrix file while it held atol 1 (a what-if), edited back: the run before is compared.
    text = config.read_text()
    config.write_text(text.replace("[cases.near.tolerances.fp32]\natol = 0.1\n", "[cases.near.tolerances.fp32]\natol = 1.0\n"))
    rejudged = trtmatrix("report", fourth.name, "-c", str(config))
    assert rejudged.returncode == 0 and "fail → pass 1" in rejudged.stderr, rejudged.stderr
    config.write_text(text)
    _, done = run()
    said = (f"run {fourth.name} was re-judged with {config.resolve()} as it was then (its content differs from now) "
            f"(trtmatrix report): its verdicts are not this matrix file's; compared with run {third.name} instead\n")
    assert done.returncode == 0 and said in done.stderr and "newly fail" not in done.stderr, done.stderr

    # Sweep 11 D9: a copy of the matrix with atol 1 beside it passes; the matrix file's run after it fails
    # (0.3 off at atol 0.1): not a regression, the copy's verdicts are not this file's.
    copy = config.with_name("loose-matrix.toml")
    copy.write_text(text.replace("[cases.near.tolerances.fp32]\natol = 0.1\n", "[cases.near.tolerances.fp32]\natol = 1.0\n"))
    made = trtmatrix("run", "-c", str(copy))
    assert made.returncode == 0, made.stderr
    copied = Path(made.stdout.strip().splitlines()[-1])
    last, done = run()
    said = (f"run {copied.name} was made from another matrix file, {copy.resolve()}: its verdicts are not this "
            "matrix file's; compared with run ")
    assert done.returncode == 0 and said in done.stderr and "newly fail" not in done.stderr, done.stderr


# An older trtmatrix, as a user upgrading from it ran it: no float64 evaluation of CumSum, so the
# reference of its output was the referee's float32 one (as sequence ops were before sweep 11 D5).
OLDER = """
import sys
import matrix.cli, matrix.prepare.fingerprint as fingerprint, matrix.reference.float64_graph as graph
real = graph.float64_values
def older(model, inputs, *args, **kwargs):
    got = real(model, inputs, *args, **kwargs)
    got.values.pop("y", None)
    got.missing["CumSum#0"] = "no float64 evaluation for CumSum"
    return got
for module in list(sys.modules.values()):
    if getattr(module, "float64_values", None) is real:
        module.float64_values = older
    if getattr(module, "prepare_code_hash", None) is fingerprint.prepare_code_hash:
        module.prepare_code_hash = lambda: "an older trtmatrix"
matrix.cli.main()
"""


def test_a_reference_trtmatrix_makes_otherwise_since_is_no_regression_of_the_engine(tmp_path, cache_dir):
    """Issue 41, sweep 12 E5: after an upgrade of trtmatrix that changed a case's reference (float64
    where it was float32), the next run said "1 cell newly fails … pass → fail" and exited 1 for an
    engine that gave the same outputs. The cell's new `fail` stands; the move is said as a reference
    change, not a regression. A user's edited expected file going red is still a regression, and so is
    a cell whose engine's outputs moved too (sweep 14 G1; examples/05_nightly_ci's second night, a new
    model, is that case through `trtmatrix run`)."""
    import subprocess
    import sys

    from test_sweep_five_texts_and_waits import TRTMATRIX  # noqa: F401 - the same venv's Python runs OLDER

    x = np.array([1e8, 1, -1e8, 1], np.float32)  # float32 loses the 1s: the float64 reference is 1 off
    body = PROFILES + save(tmp_path, "sums", [helper.make_node("CumSum", ["x", "axis"], ["y"])], [("x", T.FLOAT, [4])],
                           [("y", T.FLOAT, [4])], {"axis": np.array(0, np.int64)}, {"x": x}) + 'profiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.20",))
    older = subprocess.run([sys.executable, "-c", OLDER, "run", "-c", str(config)], capture_output=True, text=True,
                           timeout=300)
    assert older.returncode == 0 and "pass sums/fp32/ort-1.20" in older.stderr, older.stdout + older.stderr
    done = trtmatrix("run", "-c", str(config))
    first = Path(older.stdout.strip().splitlines()[-1]).name
    assert "newly fail" not in done.stderr and done.returncode == 0, done.stdout + done.stderr
    assert (f"1 cell judged in run {first} against another reference than now, the engine's outputs the same "
            "(trtmatrix evaluates the model otherwise since): not counted as regressions: sums/fp32/ort-1.20 "
            "(pass → fail)") in done.stderr, done.stderr
    # The user's own expected file, edited so that the engine fails: a regression, as before.
    np.savez(tmp_path / "sums_expected.npz", y=np.cumsum(x))  # float32's own sums: the engine passes
    config.write_text(config.read_text() + f'expected = "{tmp_path / "sums_expected.npz"}"\n')
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    np.savez(tmp_path / "sums_expected.npz", y=np.cumsum(x) + 5)
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 1 and "1 cell newly fails" in done.stderr and "another reference" not in done.stderr, \
        done.stderr


def test_an_edited_model_whose_engine_gives_the_same_outputs_is_a_regression(tmp_path, cache_dir):
    """Issue 41, sweep 16 J1: MaxPool with pads (-inf padding), then the user's edit, Pad(0) → MaxPool
    (zero padding). onnxruntime 1.20's Pad fusion runs the edit as the first model (the
    ort-pad-maxpool-fusion bug; no registry here), so the engine's outputs stayed the same and the
    reference moved: the run excused it as trtmatrix's own change and exited 0."""
    x = -np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)  # all negative: zero padding wins the max
    shapes = ([("x", T.FLOAT, [1, 1, 5, 5])], [("y", T.FLOAT, [1, 1, 3, 3])])
    pool = {"kernel_shape": [3, 3], "strides": [2, 2]}
    body = PROFILES + save(tmp_path, "m", [helper.make_node("MaxPool", ["x"], ["y"], pads=[1, 1, 1, 1], **pool)],
                           *shapes, {}, {"x": x}) + 'profiles = ["fp32"]\n'
    config = matrix_file(tmp_path, cache_dir, body, environments=("ort-1.20",), cases_dir=tmp_path)
    assert trtmatrix("run", "-c", str(config)).returncode == 0
    save(tmp_path, "m", [helper.make_node("Pad", ["x", "pads", "zero"], ["p"]), helper.make_node("MaxPool", ["p"], ["y"], **pool)],
         *shapes, {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "zero": np.array(0, np.float32)}, {"x": x})
    done = trtmatrix("run", "-c", str(config))
    assert done.returncode == 1 and "1 cell newly fails" in done.stderr and "another reference" not in done.stderr, \
        done.stdout + done.stderr
    # sweep 16 J17: a baseline whose cells ran another model is matched on cell ids, and said to be
    first = sorted((tmp_path / "reports" / "runs").glob("2*"))[0]
    done = trtmatrix("run", "-c", str(config), "--baseline", str(first))
    assert (f"warning: every cell the baseline run {first.name} shares with this run ran another model or other inputs "
            "there") in done.stderr, done.stderr
