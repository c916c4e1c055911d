"""A suite run as a support matrix, a Markdown page for docs/: per release (environment) what its
tests came to, what each upgrade gained and lost, and per ONNX operator how many of its tests
built (or passed), were refused — by the parser or the builder, with the causes — or broke, with
every test behind each. Users of onnx-tensorrt read a hand-written operators table to learn what a
release parses; this one is made by `trtmatrix support` from measurements, and the page names the
command that remakes it, so it is regenerated, never edited by hand.

A test counts for the operator it tests (report/operator_counts.py): a model of several operators
(onnx's light networks) is counted per release but listed under no operator.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from ..statuses import ORDER, change, gained_and_lost
from .causes import cause, left_out_kind
from .markdown_summary import _md
from .operator_counts import tested_operators
from .upgrade import env_order, version_texts

# The columns the page reads (a run's results reduced to them make the same page).
COLUMNS = ["cell_id", "row_id", "case", "params", "profile", "env", "engine", "engine_version", "env_version",
           "status", "error", "suite", "operators"]
GOOD_WORDS = {"built": "built", "pass": "passed"}
# Where TensorRT's refusals come from, by the words the worker writes (worker/engines/tensorrt_engine.py).
REFUSERS = {"'s ONNX parser: ": "refused by the parser", "'s builder: ": "refused by the builder"}


def _word(status: str, error) -> str:
    """'refused by the parser' / 'refused by the builder' (TensorRT's, from its words), 'refused'
    (onnxruntime's session or kernel), 'built', 'passed', or the status."""
    if status == "unsupported":
        words = error if isinstance(error, str) else ""
        return next((said for mark, said in REFUSERS.items() if mark in words), "refused")
    return {"built": "built", "pass": "passed"}.get(status, status)


def release_lines(frame: pd.DataFrame, envs: list[str]) -> list[str]:
    """One sentence per environment: 'trt-rtx-1.4 (tensorrt-rtx 1.4.0.76): 899 of 1841 tests built,
    845 refused by the parser, 52 refused by the builder, 45 error.'"""
    versions, lines = version_texts(frame), []
    for env in envs:
        cells = frame[frame["env"] == env]
        counts = Counter(_word(s, e) for s, e in zip(cells["status"], cells["error"]))
        good = [w for w in ("built", "passed") if counts.get(w)] or ["built"]
        rest = [f"{n} {w}" for w, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])) if w not in good]
        lines.append(f"{env} ({' '.join(versions[env]).strip()}): "
                     + ", ".join([f"{counts.get(good[0], 0)} of {len(cells)} tests {good[0]}", *rest]) + ".")
    return lines


def upgrade_lines(frame: pd.DataFrame, envs: list[str]) -> list[str]:
    """What each release gained and lost against the one before it, and the last against the first."""
    statuses = frame.pivot_table(index="row_id", columns="env", values="status", aggfunc="first")
    pairs = list(zip(envs, envs[1:])) + ([(envs[0], envs[-1])] if len(envs) > 2 else [])
    return [f"{a} → {b}: " + gained_and_lost(Counter(change(x, y) for x, y in zip(statuses[a], statuses[b])))
            for a, b in pairs]


def _cell_text(cells: list[dict]) -> str:
    """'4 of 6 built (refused 2)' for an operator's tests in one environment."""
    if not cells:
        return "—"
    counts = Counter(c["status"] for c in cells)
    good = next((s for s in GOOD_WORDS if counts.get(s)), "built")
    rest = ", ".join(f"{'refused' if s == 'unsupported' else s} {counts[s]}" for s in ORDER if s != good and counts.get(s))
    return f"{counts.get(good, 0)} of {len(cells)} {GOOD_WORDS[good]}" + (f" ({rest})" if rest else "")


def _test_text(cell: dict | None, causes: dict[str, int]) -> str:
    """'built', or 'refused [1]' with the cause numbered once per operator (`causes`, filled here)."""
    if cell is None:
        return "—"
    if cell["status"] in GOOD_WORDS:
        return cell["status"]
    said = f"{_word(cell['status'], cell['error'])}: {cause(cell['status'], cell['error']).removeprefix('builder: ')}"
    number = causes.setdefault(said, len(causes) + 1)
    return f"{'refused' if cell['status'] == 'unsupported' else cell['status']} [{number}]"


def support_markdown(frame: pd.DataFrame, run: dict, command: str) -> str:
    """The page; `command`: the one that remakes it, named at its top."""
    frame = frame[frame["suite"].notna()]
    envs = env_order(frame)
    tested = tested_operators(frame)
    single = {row: ops[0] for row, ops in tested.items() if len(ops) == 1}
    cells = {(r["row_id"], r["env"]): r for r in frame[COLUMNS].to_dict("records")}
    profiles = frame["profile"].nunique() > 1
    by_operator: dict[str, list[str]] = {}
    for row, operator in sorted(single.items(), key=lambda x: (x[1].lower(), x[0])):
        by_operator.setdefault(operator, []).append(row)
    suites = ", ".join(sorted(set(frame["suite"])))
    lines = [f"# ONNX operator support: {', '.join(envs)}", "",
             "<!-- Generated: do not edit. Remake it with the command below. -->",
             f"Made by `{command}` from run `{run.get('run_id', '?')}` (started {run.get('started', '?')}) of "
             f"{_md(suites)}. Every number is a cell of that run (statuses: docs/statuses.md): "
             "`built` an engine that built where it cannot run, `refused` the engine refusing the model (the cause "
             "here, its own words in the run), `error` something that broke.", "",
             "## Releases", ""]
    lines += [f"- {_md(line)}" for line in release_lines(frame, envs)]
    left_out = Counter(left_out_kind(why) for tests in (run.get("left_out") or {}).values() for why in tests.values())
    if left_out:
        lines += ["", f"{left_out.total()} tests of the suite are no rows here (the run's run.json names each with "
                      "its reason): " + ", ".join(f"{_md(kind)} ×{n}" for kind, n in left_out.most_common()) + "."]
    lines += ["", "What each upgrade gained and lost (rows; `newly supported`: refused before):", ""]
    lines += [f"- {_md(line)}" for line in upgrade_lines(frame, envs)]
    several = len(set(tested) - set(single))
    lines += ["", "## Per operator", "",
              f"{len(by_operator)} operators, {len(single)} tests (each counts for the one operator it tests"
              + (f"; {several} models of several operators are counted above only" if several else "") + ").", "",
              "| operator | tests | " + " | ".join(_md(e) for e in envs) + " |",
              "|---|---:|" + "---|" * len(envs)]
    for operator, rows in by_operator.items():
        per_env = [_cell_text([cells[(r, e)] for r in rows if (r, e) in cells]) for e in envs]
        lines.append(f"| [{_md(operator)}](#{operator.lower()}) | {len(rows)} | " + " | ".join(per_env) + " |")
    lines += ["", "## The tests behind each operator"]
    for operator, rows in by_operator.items():
        lines += ["", f"### {_md(operator)}", "", "| test | " + " | ".join(_md(e) for e in envs) + " |",
                  "|---|" + "---|" * len(envs)]
        causes: dict[str, int] = {}
        for row in rows:
            _, test, profile = row.split("/", 2)
            lines.append(f"| {_md(test.removeprefix('test=') + (f'/{profile}' if profiles else ''))} | "
                         + " | ".join(_test_text(cells.get((row, e)), causes) for e in envs) + " |")
        lines += [""] * bool(causes) + [f"{number}. {_md(said)}" for said, number in causes.items()]
    return "\n".join(lines) + "\n"
