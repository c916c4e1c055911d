"""Every cell status, and how each view groups it: one place, so that a status is counted,
coloured and compared alike in the matrix, the terminal, JUnit, history and the upgrade view.

- `built`: a TensorRT engine that built where it cannot run (no GPU; a GPU the product does not
  support). Its build facts are real, its numbers were never measured: never `pass`, but a cell
  that built before and fails to build now is a regression.
- `unsupported`: the engine refuses the model (TensorRT's ONNX parser, in its own words): not
  something that broke, and never a regression by itself.
- `disputed` and `no_reference`: trtmatrix's own side of the comparison could not be trusted (the
  two evaluations of the model part, a user's expected file disagrees with both) or made: nothing was
  judged, and the run says so and does not exit 0 (matrix/reference/).
"""

from __future__ import annotations

# The order statuses are listed and counted in.
ORDER = ["pass", "built", "fail", "error", "crash", "timeout", "unsupported", "skipped", "xfail", "xpass",
         "disputed", "no_reference"]
# What a regression starts from, and what it ends in (a known issue's xfail is not a regression).
GOOD = frozenset({"pass", "xpass", "built"})
BAD = frozenset({"fail", "error", "crash", "timeout", "xfail"})
REGRESSED = BAD - {"xfail"}
# Judged against the reference: numbers were measured.
JUDGED = frozenset({"pass", "fail", "xfail", "xpass"})
# Nothing to compare against a version that did not get to judge the cell.
NOT_COMPARABLE = frozenset({"skipped", "disputed", "no_reference"})
# No reference to judge against: the run ends with what to do, and not with exit 0.
UNJUDGED = ("disputed", "no_reference")
# Worth a person's look after a run: the cells read one by one (their numbers or their fault are
# the news), and those read as groups by cause (thousands of refusals are a handful of causes).
ONE_BY_ONE = ("fail", "xpass", "crash", "timeout")
BY_CAUSE = ("error", "disputed", "no_reference", "unsupported")
# An operator's (or any group's) colour: its worst status, in this order.
WORST_FIRST = ["crash", "timeout", "fail", "error", "disputed", "no_reference", "xfail", "unsupported", "skipped", "built"]
# The word and rich style each gets in a terminal table.
TERMINAL = {"pass": ("pass", "green"), "built": ("built", "cyan"), "fail": ("FAIL", "bold red"),
            "error": ("ERR", "yellow"), "crash": ("CRASH", "bold magenta"), "timeout": ("T/O", "magenta"),
            "unsupported": ("unsup", "dim yellow"), "skipped": ("skip", "dim"), "xfail": ("xfail", "blue"),
            "xpass": ("XPASS", "bold cyan"), "disputed": ("DISP", "bold yellow"),
            "no_reference": ("NOREF", "bold yellow")}


# The upgrade view's groups, in the order it lists them. Two builds compared nothing: "built in
# both; not run" is not "unchanged", which reads as "the same numbers".
BUILT_BOTH = "built in both; not run"
CHANGES = ["newly failing", "newly supported, failing", "newly passing", "newly building", "newly supported",
           "newly unsupported", "other changes", BUILT_BOTH, "unchanged", "not comparable"]
# What a release gained and lost: each a sum of groups, said with its parts. A parser refusal that
# now builds is newly supported, not newly building: both are gains.
GAINED = ("newly passing", "newly building", "newly supported")
LOST = ("newly failing", "newly unsupported")
# Rows whose two sides were not both judged or refused: no gain or loss can be read from them.
UNCOMPARED = (BUILT_BOTH, "not comparable")


def change(before, after) -> str:
    """How a cell moved from one environment (or run) to another, as the upgrade view groups it:
    every change of status is a change ("other changes": error → fail, built → pass, ...)."""
    if not isinstance(before, str) or not isinstance(after, str) or {before, after} & NOT_COMPARABLE:
        return "not comparable"
    if before == after:
        return BUILT_BOTH if before == "built" else "unchanged"
    if after == "unsupported":
        return "newly unsupported"
    if before == "unsupported" and after in GOOD:
        return "newly supported"
    if before == "unsupported" and after in REGRESSED:  # it loads now, and gives a wrong answer or breaks
        return "newly supported, failing"
    if before in GOOD and after in BAD:
        return "newly failing"
    if before not in GOOD and after in GOOD:
        return "newly building" if after == "built" else "newly passing"
    return "other changes"


def gained_and_lost(counts: dict[str, int]) -> str:
    """'gained 25 (newly supported 8, newly building 17); lost 1 (newly unsupported 1)' from the
    rows per change: a release's gain is one number with its parts. Where no row was compared
    (every one built in both and not run, or skipped on a side), that comes first: "gained 0;
    lost 0" alone would read as a safe upgrade."""
    said = []
    if counts and not sum(n for group, n in counts.items() if group not in UNCOMPARED):
        said.append("nothing compared (" + ", ".join(f"{counts[g]} {g}" for g in UNCOMPARED if counts.get(g)) + ")")
    for word, groups in (("gained", GAINED), ("lost", LOST)):
        parts = [f"{group} {counts[group]}" for group in groups if counts.get(group)]
        said.append(f"{word} {sum(counts.get(g, 0) for g in groups)}" + (f" ({', '.join(parts)})" if parts else ""))
    return "; ".join(said)

# How a failing cell's cause begins where a user's expected file alone makes it fail (run.py): the
# engine computed the model right, so no engine fault (a known issue's) explains it.
EXPECTED_CAUSE = "the expected file is the cause, not the engine: "
# How it begins where float32 rounding decides the output in the model's own evaluation and the
# file holds one side of that step (run.py): neither an engine nor a tolerance is to blame, so
# explain and repro stop there (issue 41, sweep 7 N6).
STEP_CAUSE = "in the model's own evaluation "
