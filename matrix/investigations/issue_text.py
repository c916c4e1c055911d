"""The sentences of a repro's ISSUE.md that carry its facts: the title (op, trigger, result, the
releases), the description's numbers, and what expected.npz is. Written from the cell's own facts
and the attached verification runs, so that a maintainer reading them finds the same numbers when
running repro.py.

An output the engine never wrote (values of uninitialised memory) is said as such, not given as a
number, only where the evidence is for it: the values change between inferences or processes. A
NaN or Inf where the reference is finite is said as what it is, with whether reruns agree (a
LayerNormalization's negative variance on a constant row is a computed NaN, the same every time).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..graph_walk import every_node

if TYPE_CHECKING:
    from .repro import Repro
    from .repro_issue import IssueFacts

UNWRITTEN = "output not written (uninitialised memory)"
TITLE_MAX = 256  # characters a GitHub issue title holds
CHANGES = "outputs change between inferences"  # what repro.py prints when they do
# What repro.py's verdict line counts: "WRONG: 768 NaN and 2 Inf where expected is finite, …"
COUNTED = re.compile(r"^WRONG: (?:(\d+) NaN)?(?: and )?(?:(\d+) Inf)? where expected is finite", re.M)


def _number(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if pd.isna(value) else value


def failing_run(repro: Repro):
    """The verification on the failing release: the run attached to the report."""
    return next((v for v in repro.verified if v.expect != "pass"), None)


def unwritten(facts: IssueFacts, repro: Repro, record: dict) -> str | None:
    """Why the outputs read as memory never written, or None."""
    if facts.own["verdict"] != "fail":
        return None
    tolerance = float(facts.own["atol"])
    drift = _number(record.get("drift_max_abs"))
    if drift and drift > tolerance:
        return f"the values change between inferences of one session (by up to {drift:.3g})"
    bad = failing_run(repro)
    if bad is not None and CHANGES in bad.run.output:
        return "the values change between inferences of one session when repro.py runs"
    measured = _number(record.get("max_abs"))
    again = _number(bad.max_abs) if bad is not None else None
    if measured and again and max(measured, again) > 10 * min(measured, again) and min(measured, again) > tolerance:
        return (f"the values differ from one process to the next (max_abs {measured:.3g} in trtmatrix's run, "
                f"{again:.3g} in the attached run of repro.py)")
    return None


def nonfinite(record: dict) -> tuple[int, int]:
    """(NaN, Inf) the cell's outputs hold where the reference is finite."""
    return int(_number(record.get("nan_count")) or 0), int(_number(record.get("inf_count")) or 0)


def _kinds(nans: int, infs: int, counted: bool = False) -> str:
    """'NaN', 'Inf' or 'NaN and Inf' ('768 NaN and 2 Inf' where `counted`)."""
    return " and ".join(f"{count} {word}" if counted else word for count, word in ((nans, "NaN"), (infs, "Inf")) if count)


def _rerun_words(repro: Repro, record: dict) -> str:
    """Whether the failing release's NaN/Inf come back alike: repro.py's inferences of one session,
    and its count against trtmatrix's run. Said only where the attached run shows it."""
    bad = failing_run(repro)
    counted = COUNTED.findall(bad.run.output) if bad is not None else []
    if not counted or CHANGES in bad.run.output:
        return ""
    again = tuple(int(n or 0) for n in counted[-1])
    same = "the same in each inference of the attached run of repro.py"
    if again == nonfinite(record):
        same += " and as many as in trtmatrix's run"
    return f" ({same}: deterministic)"


def result_words(facts: IssueFacts, repro: Repro, record: dict) -> str:
    """'wrong outputs (max_abs 3.41 …)', 'NaN where the reference is finite', 'output not written
    …', 'raises: …' or 'crashes'."""
    status = facts.own["verdict"]
    if status == "error":
        return "raises: " + (str(facts.own.get("error") or "").strip().splitlines() or ["an exception"])[0]
    if status == "crash":
        return "crashes the process"
    if unwritten(facts, repro, record):
        return UNWRITTEN
    if any(nonfinite(record)):
        return f"{_kinds(*nonfinite(record))} where the reference is finite"
    bad = failing_run(repro)
    worst = (bad.max_abs if bad is not None and bad.max_abs else None) or f"{_number(record.get('max_abs')) or 0:.3e}"
    return f"wrong outputs (max_abs {worst})"


def release_range(facts: IssueFacts) -> str:
    history = facts.history
    first, last = history.first_bad or facts.version, history.last_bad or facts.version
    return first if first == last else f"{first} to {last}"


def title(facts: IssueFacts, repro: Repro, record: dict, triggers: list[str], ops: list[str]) -> str:
    """`triggers`: the failing op's wordings, most complete first (trigger.py): the first whose
    title fits a tracker's title field is taken."""
    rest = _title_rest(facts, repro, record)
    fits = [t for t in triggers if len(t) + len(rest) <= TITLE_MAX] or triggers[-1:]
    what = fits[0] if fits else ", ".join(ops[:4]) + (", …" if len(ops) > 4 else "") if ops else "the module"
    return what + rest


def _title_rest(facts: IssueFacts, repro: Repro, record: dict) -> str:
    """What follows the trigger in a title: the result, the releases, the fix."""
    where = {"onnxruntime": "CPU"}.get(facts.envdef.engine, facts.record_where)
    if facts.envdef.engine == "onnxruntime" and facts.profile.optimization == "off":
        where += ", ORT_DISABLE_ALL"
    text = f": {result_words(facts, repro, record)} on {facts.product} {release_range(facts)} ({where})"
    history = facts.history
    if history.fixed_in:
        text += f"; fixed in {history.fixed_in}"
    elif history.gone_in:
        text += f"; finite on {history.gone_in}"
    elif len(history.releases) > 1 and history.newest_fails:
        text += f"; still fails on {history.releases[-1]}"
    return text


def outputs_sentence(facts: IssueFacts, repro: Repro, record: dict, where: str) -> str:
    """The description's first sentence: what the failing release gives, in the attached run's numbers."""
    status = facts.own["verdict"]
    if status in ("error", "crash"):
        return f"{where} {result_words(facts, repro, record)}."
    why = unwritten(facts, repro, record)
    if why:
        return (f"{where} returns outputs it never wrote ({why}): values of uninitialised memory, not a computed "
                "result, so no error size means anything.")
    if any(nonfinite(record)):
        return (f"{where} returns {_kinds(*nonfinite(record), counted=True)} where the reference is finite"
                f"{_rerun_words(repro, record)}.")
    bad = failing_run(repro)
    worst = bad.max_abs if bad is not None and bad.max_abs else f"{_number(record.get('max_abs')) or 0:.3e}"
    share = _number(record.get("mismatch_frac"))
    return (f"{where} gives outputs up to {worst} away from `expected.npz`"
            + (f": {100 * share:.1f} % of the elements are outside" if share is not None else "; elements outside")
            + f" atol {float(facts.own['atol']):g} + rtol {float(facts.own['rtol']):g}·|expected|.")


def expected_words(arrays: dict[str, np.ndarray], how: str) -> str:
    """What expected.npz holds, by its own dtypes: `how` says where it comes from (prepare's words
    address the user — "your expected outputs" — and a report is read by someone else)."""
    dtypes = sorted({str(a.dtype) for a in arrays.values()})
    return f"{how.replace('your expected outputs', 'the expected outputs given with the model')}; stored as {', '.join(dtypes)}"


def profile_settings(profile) -> str:
    """What a profile sets, in the engine's terms, where its description says nothing."""
    said = [profile.precision.upper()]
    if profile.optimization == "off":
        said.append("graph optimisations off (onnxruntime: ORT_DISABLE_ALL)")
    if profile.keep_fp32:
        said.append("kept in FP32: " + ", ".join(profile.keep_fp32))
    return ", ".join(said)


def node_count(graph) -> int:
    """Every node of a graph, also those inside subgraphs (an If's or a Loop's branches)."""
    return sum(1 for _ in every_node(graph))
