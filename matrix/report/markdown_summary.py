"""`trtmatrix summary`: a run as GitHub-flavoured Markdown, to paste into release notes or a pull
request. A line per environment (engine and version, counts per status, a verdict), then the
upgrade from A to B: newly failing, newly passing, newly unsupported, newly supported (and
newly building), each cell with its worst error, drift, how far B is from A, the known issue
that covers it, a link to the cell in the published report (its permalink, `#cell-<id>`) and,
where `trtmatrix repro` made one, to the failing cell's repro folder.
Short by default (the first SHORT of each group, the rest counted); complete when asked."""

from __future__ import annotations

import unicodedata
from urllib.parse import quote, urljoin

import pandas as pd

from ..statuses import BUILT_BOTH, CHANGES, ORDER, REGRESSED, UNJUDGED, gained_and_lost
from .a_vs_b import a_vs_b_text
from .error_text import drift_text, one_line, worst_error
from .findings_view import repro_href
from .causes import no_tensorrt_compared
from .precision_ran import every_node_wider
from .reference_lines import reference_lines
from .upgrade import declared_only, env_order, version_mismatches, version_texts

SHORT = 20
# The upgrade's groups a release note lists, in the order of every view (rows whose status did not
# change are counted only).
COUNTED_ONLY = (BUILT_BOTH, "unchanged", "not comparable")
LISTED = [c for c in CHANGES if c not in COUNTED_ONLY]


def _md(text) -> str:
    """Text as Markdown shows it: its punctuation taken literally, never as markup or a table cell's
    end; a line break or another control character (a CR ends a line too) is a space."""
    special = "\\`*_[]<>|~"
    return "".join("\\" + c if c in special else " " if unicodedata.category(c) == "Cc" else c for c in str(text))


# What a link's address keeps as it is: a URL's own punctuation. Anything else — a space, a
# parenthesis that would end the link early (`x) [click](…)`), a control character — is
# percent-encoded, so the address stays one address.
URL_SAFE = ":/?#[]@!$&'*+,;=%~-._"


def link_address(link_base: str) -> str:
    return quote(link_base, safe=URL_SAFE)


def cell_link(cell_id: str, link_base: str) -> str:
    """The report's own permalink of a cell."""
    return f"{link_address(link_base)}#cell-{quote(cell_id, safe='/=._-~')}"


def verdict(cells: pd.DataFrame) -> str:
    counts = cells["status"].value_counts()
    bad = int(counts[counts.index.isin(REGRESSED)].sum())
    refused = int(counts.get("unsupported", 0))
    also = f", {refused} unsupported" if refused else ""
    if bad:
        return f"❌ {bad} failing or broken{also}"
    known, passed = int(counts.get("xfail", 0)), int(counts.get("pass", 0) + counts.get("xpass", 0))
    if unjudged := int(counts[counts.index.isin(UNJUDGED)].sum()):  # no green tick over cells never judged
        return f"⚠️ {unjudged} not judged (reference disputed or missing)" + (f", {passed} pass" if passed else "") + also
    if known:  # failing as a known issue says: never a green tick (4 of 6 cells xfail read as "✅ passes")
        return f"⚠️ {known} known failure{'s' * (known != 1)} (xfail)" + (f", {passed} pass" if passed else "") + also
    if passed:
        wider = int(cells["precision_ran"].map(every_node_wider).sum()) if "precision_ran" in cells else 0
        return "✅ passes" + also + (f" ({wider} reduced-precision cell{'s' * (wider != 1)} ⇡: no node computed in "
                                     "that precision)" if wider else "")
    if counts.get("built", 0):
        return "🔨 built, not run here"
    if counts.get("skipped", 0) == len(cells):
        return f"⏭ skipped: {_md(one_line(cells['error'].iloc[0]))}"
    return "— nothing judged"


def _environments(frame: pd.DataFrame) -> list[str]:
    lines = ["| environment | engine | cells | " + " | ".join(s for s in ORDER) + " | verdict |",
             "|---|---|---:|" + "---:|" * len(ORDER) + "---|"]
    versions, declared = version_texts(frame), declared_only(frame)
    for env in env_order(frame):
        cells = frame[frame["env"] == env]
        engine = " ".join(versions[env]).strip() + (" (declared, not run)" if env in declared and versions[env][1] else "")
        counts = cells["status"].value_counts()
        lines.append(f"| {_md(env)} | {_md(engine)} | {len(cells)} | "
                     + " | ".join(str(counts.get(s, "")) for s in ORDER) + f" | {verdict(cells)} |")
    return lines


def _known_issue(row: dict, registry: dict) -> str | None:
    issue = registry.get(row.get("known_issue")) if isinstance(row.get("known_issue"), str) else None
    if issue is None:
        return None
    url, _, more = issue.source.partition(" ")  # a source may go on after its URL: "(fixed by …)"
    return f"known issue [{_md(issue.id)}: {_md(issue.title)}]({link_address(url)})" + (f" {_md(more)}" if more else "")


def repro_link(finding: dict, link_base: str) -> str:
    """The ISSUE.md of a cell's repro folder, beside the report (the run folder) or published with it."""
    target = urljoin(link_base, repro_href(finding["folder"]) + "/ISSUE.md")
    return f"[repro{'' if finding['confirmed'] else ' (not confirmed)'}]({target})"


def _cell_line(row_id: str, a: dict | None, b: dict | None, against: dict | None, registry: dict, link_base: str,
               repros: dict) -> str:
    shown = b or a
    status = " → ".join(x["status"] if x else "—" for x in (a, b))
    parts = [f"[`{row_id}`]({cell_link(shown['cell_id'], link_base)})", status]
    for side, cell in (("A", a), ("B", b)):
        worst = worst_error(cell, 2) if cell else None
        if worst:
            parts.append(f"worst {side} {_md(worst)}" + (f", {_md(drift_text(cell))}" if drift_text(cell) else ""))
    if against_text := a_vs_b_text(against):
        parts.append(f"B against A: {_md(against_text)}")
    if issue := _known_issue(b or {}, registry) or _known_issue(a or {}, registry):
        parts.append(issue)
    if b and b["cell_id"] in repros:
        parts.append(repro_link(repros[b["cell_id"]], link_base))
    return "- " + " · ".join(parts)


def summary_markdown(frame: pd.DataFrame, run: dict, pair: tuple[str, str] | None, compared: pd.DataFrame | None,
                     measured: dict, registry: dict, link_base: str, everything: bool = False,
                     repros: dict | None = None) -> str:
    """`compared`: upgrade.compare of the pair; `measured`: a_vs_b of the pair; `registry`: {id: KnownIssue};
    `repros`: {cell id: repro finding} (a failing B cell links its folder's ISSUE.md)."""
    lines = [f"## trtmatrix run `{run.get('run_id', '?')}`", "",
             f"{len(frame)} cells · started {run.get('started', '?')} on {_md(run.get('host', '?'))} · "
             f"[full report]({link_address(link_base)})", ""]
    lines += [f"> ⚠ {_md(m)}" for m in version_mismatches(frame)]
    if said := no_tensorrt_compared(frame):
        lines += [f"> **{_md(said)}**", ""]
    if unjudged := reference_lines(frame):  # a reference not trusted, said once (a blank line ends the quote)
        lines += [f"> **{_md(line)}**" for line in unjudged] + [""]
    lines += _environments(frame) + [""]
    if pair is None or compared is None:
        return "\n".join(lines)
    env_a, env_b = pair
    lines += [f"### Upgrade {_md(env_a)} → {_md(env_b)}", ""]
    cells = {(r["row_id"], r["env"]): r for r in frame[frame["env"].isin(pair)].to_dict("records")}
    counted = compared["change"].value_counts()
    lines.append(gained_and_lost(counted.to_dict()).capitalize() + ".")
    lines += ["", ", ".join(f"{int(counted.get(c, 0))} {c}" for c in [*LISTED, *COUNTED_ONLY]) + "."]
    for change in LISTED:
        rows = list(compared.loc[compared["change"] == change, "row_id"])
        if not rows:
            continue
        lines += ["", f"#### {change.capitalize()} ({len(rows)})", ""]
        for row_id in rows if everything else rows[:SHORT]:
            lines.append(_cell_line(row_id, cells.get((row_id, env_a)), cells.get((row_id, env_b)),
                                    measured.get(row_id), registry, link_base, repros or {}))
        if not everything and len(rows) > SHORT:
            lines.append(f"- … and {len(rows) - SHORT} more (`trtmatrix summary --all` lists every one)")
    return "\n".join(lines) + "\n"
