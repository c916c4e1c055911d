"""When a run (or a merge of shards) exits 1: a regression against a baseline, --strict, a cell not judged."""

from __future__ import annotations

from pathlib import Path

from ..config import ConfigError
from .common import _fail


def _baseline(path: Path | None):
    """--baseline's run and its results, read before anything runs: a wrong path or a damaged run
    costs no run."""
    from ..store import read_run
    from ..store.baseline import find_baseline

    if path is None:
        return None
    try:
        found = find_baseline(path)
        return found, read_run(found)
    except ConfigError as exc:
        _fail(f"--baseline {exc}")


def _baseline_holds(baseline, cell_ids, case_keys: dict[str, str] | None = None) -> None:
    """A baseline holding none of the run's cells would compare nothing and let every regression
    through: refused (exit 2); one holding some of them: the others are said to be compared with nothing;
    one whose cells all ran other models or inputs (`case_keys`, the plan's: {cell id: case key}) is said
    to: a generic cell id (`m/fp32/ort-1.20`) of another project's run matched (issue 41, sweep 16 J17)."""
    from ..report.console import console, escape

    if baseline is None:
        return
    wanted = list(dict.fromkeys(cell_ids))
    held = set(baseline[1]["cell_id"]) & set(wanted)
    given = dict(zip(baseline[1]["cell_id"], baseline[1]["case_key"])) if "case_key" in baseline[1] else {}
    other = [c for c in held if case_keys and isinstance(given.get(c), str) and given[c] != case_keys.get(c)]
    if held and len(other) == len(held):
        console.print(escape(f"warning: every cell the baseline run {baseline[0].name} shares with this run ran "
                             "another model or other inputs there (their case keys differ): another project's run? "
                             "compared all the same"), soft_wrap=True)
    if not held:
        _fail(f"--baseline {baseline[0]}: that run holds none of this run's {len(wanted)} cells (another matrix, "
              "or a run of other --env/--case): nothing to compare with, no regression could be seen")
    missing = [cell_id for cell_id in wanted if cell_id not in held]
    if missing:
        console.print(escape(f"warning: the baseline run {baseline[0].name} holds {len(held)} of this run's "
                             f"{len(wanted)} cells; {len(missing)} are compared with nothing: "
                             + ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")),
                      soft_wrap=True)


def _say_references(frame) -> None:
    """What a run says once about its references (report/reference_lines.py): by `run` and `merge`
    alike, since a cell not judged for want of a reference exits 1 and must say why."""
    from ..report.console import console, escape
    from ..report.reference_lines import reference_lines

    for line in reference_lines(frame):
        console.print(f"[bold yellow]{escape(line)}[/]", soft_wrap=True)


def _gate(reports_dir: Path, run_dir: Path, frame, baseline, strict: bool) -> bool:
    """Whether the run exits 1: a regression against `baseline` ((run folder, results); else the
    previous whole run in the reports folder judged with this run's files) or, `strict`, any failure
    no known issue covers or a cell that was good before and was skipped now (each listed on
    stderr); or a cell not judged for want of a trustworthy reference (said above)."""
    from ..report.console import console, escape, uncovered_lines
    from ..statuses import UNJUDGED
    from ..store import judged_otherwise, list_runs, previous_results, read_run_meta

    now = read_run_meta(run_dir)
    passed_over = []
    if baseline is not None:  # the user's choice, used as it is: a re-judged one is said so
        other = judged_otherwise(read_run_meta(baseline[0]), now)
        console.print(escape(f"compared with the baseline run {baseline[0]}" + (
            f", re-judged with {other} (trtmatrix report): its verdicts are that file's, not this matrix file's"
            if other else "")), soft_wrap=True)
        earlier = [baseline]
    else:
        earlier, passed_over = previous_results(reports_dir, run_dir, frame["cell_id"], now)
        _say_passed_over(passed_over, earlier)
    if not earlier and not passed_over and any(p.name != run_dir.name for p in list_runs(reports_dir)):
        console.print(escape("warning: no earlier run holds any of this run's cells: nothing to compare with "
                             "(another matrix, or a run of other --env/--case)"), soft_wrap=True)
    newly = _newly_failing(earlier, frame, run_dir)
    not_run = _not_run_now(earlier, frame)
    uncovered = uncovered_lines(frame) if strict else []
    for line in uncovered:
        console.print(line, soft_wrap=True)
    # a cell beside a step ran and was compared where no step decides (sweep 19 M18)
    tested = bool(frame["status"].isin(TESTED).any() or ((frame["status"] == "disputed") & frame["max_abs"].notna()).any())
    if not tested:  # issue 41, sweep 18 L18: a matrix that tests nothing was a green CI job
        console.print(escape("nothing was tested: no cell of this run got a verdict (pass, fail, xfail, xpass) or "
                             "was built" + (" (--strict: exit 1)" if strict else "")), soft_wrap=True)
    return newly or bool(uncovered) or (strict and (not_run or not tested)) or bool(frame["status"].isin(UNJUDGED).any())


# Statuses of a cell that tested something: compared with its reference, or (TensorRT-RTX here) built.
TESTED = ("pass", "fail", "xfail", "xpass", "built")


def _say_passed_over(passed_over, earlier) -> None:
    """One line per earlier run passed over for having been judged with another file (issue 41,
    sweep 9 B4, sweep 11 D9): which runs its cells were compared with instead, or that they had none."""
    from ..report.console import console, escape

    for run, how, cells in passed_over:
        instead = [r.name for r, rows in earlier if cells & set(rows["cell_id"])]
        alone = len(cells - {c for r, rows in earlier for c in rows["cell_id"]})
        console.print(escape(
            f"run {run.name} {how}: its verdicts are not this matrix file's; "
            + (f"compared with run{'s' * (len(instead) > 1)} {', '.join(instead)} instead" if instead else "no earlier run to compare with")
            + (f" ({alone} of its {len(cells)} cells with no earlier run)" if instead and alone else "")),
            soft_wrap=True)


def _newly_failing(earlier, frame, run_dir: Path) -> bool:
    """Whether a cell of `frame` (run `run_dir`) newly fails against its result in `earlier` ([(run
    folder, results)], newest first): a regression, exit 1; each such cell listed on stderr. A cell
    whose engine gave the same outputs, judged then against another reference (store.only_reference_changed),
    is said apart, no regression."""
    from ..report.console import console, escape
    from ..report.error_text import worst_error
    from ..report.upgrade import regressions
    from ..store import only_reference_changed

    newly = 0
    now = _own_references(frame)
    for run, rows in earlier:
        found = regressions(rows, frame)
        then = _own_references(rows)
        moved = [c in then and c in now and then[c][2] == now[c][2]
                 and only_reference_changed(run, then[c][:2], run_dir, now[c][:2]) for c in found["cell_id"]]
        if any(moved):
            said = [f"{r['cell_id']} ({r['status_before']} → {r['status_now']})" for _, r in found[moved].iterrows()]
            console.print(escape(f"{len(said)} cell{'s' * (len(said) != 1)} judged in run {run.name} against another "
                                 "reference than now, the engine's outputs the same (trtmatrix evaluates the model "
                                 "otherwise since): not counted as regressions: " + ", ".join(said[:3]) + (f" and {len(said) - 3} more" if len(said) > 3 else "")),
                          soft_wrap=True)
            found = found[[not m for m in moved]]
        if not len(found):
            continue
        newly += len(found)
        console.print(f"[bold red]{len(found)} cell{'s' * (len(found) != 1)} newly fail{'s' * (len(found) == 1)} "
                      f"compared with run {run.name}:[/]")
        for _, r in found.iterrows():
            worst = worst_error(r, 2)
            console.print(escape(f"  {r['cell_id']}: {r['status_before']} → {r['status_now']}"
                                 + (f" ({worst})" if worst else "")), soft_wrap=True)
    return bool(newly)


def _own_references(frame) -> dict[str, tuple[str, str, str]]:
    """{cell id: (its artifact, its content key, its case key)} of the cells judged against a reference
    trtmatrix made, not the user's file: an edited file going red is a regression to see (as a
    tightened tolerance is), and so is an edited model (sweep 16 J1; runs before the case key had none)."""
    given = frame["case_key"] if "case_key" in frame else [None] * len(frame)
    return {cell: (artifact, key, case) for cell, artifact, key, case, how in zip(
                frame["cell_id"], frame["artifact"], frame["content_key"], given, frame["reference"])
            if isinstance(artifact, str) and isinstance(key, str) and isinstance(case, str)
            and not str(how).startswith("your expected outputs")}


def _not_run_now(earlier, frame) -> bool:
    """Whether a cell that was good in `earlier` was skipped now: nothing it tested was tested (a
    GPU, an image or Docker gone overnight). Said in one line per earlier run; --strict exits 1."""
    from ..report.causes import cause
    from ..report.console import console, escape
    from ..report.upgrade import no_longer_run

    said = False
    for run, rows in earlier:
        found = no_longer_run(rows, frame)
        if not len(found):
            continue
        said = True
        ids = list(found["cell_id"])
        reasons = "; ".join(dict.fromkeys(cause("skipped", error) for error in found["error"]))
        verb = "passed" if set(found["status_before"]) <= {"pass", "xpass"} else "passed or built"
        console.print(escape(f"{len(ids)} cell{'s' * (len(ids) != 1)} {verb} in run {run.name} and did not run now: "
                             + ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
                             + f" (skipped: {reasons})"), soft_wrap=True)
    return said
