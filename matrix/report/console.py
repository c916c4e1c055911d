"""What a person sees in the terminal: a progress bar while a run goes, a compact table after."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections import Counter
from fnmatch import fnmatchcase
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape as escape_markup
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..plan import row_words
from ..statuses import BY_CAUSE, CHANGES, JUDGED, ONE_BY_ONE, REGRESSED, TERMINAL as SHORT, gained_and_lost
from .causes import cause, left_out_kind, not_run_reason
from .timing import P_THRESHOLD, timing_text
from .error_text import bits_text, drift_text, needed_text, one_line, rule_text, with_marks, worst_error
from .upgrade import env_order, natural_key, records_by_row, version_mismatches


# Control characters (an ANSI escape in a name, say) are shown as text, never sent to the terminal.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def escape(text: str) -> str:
    """User text as data for rich: markup escaped, control characters written out (\\x1b)."""
    return escape_markup(CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), str(text)))


# Narrower than this, nothing can be shown (COLUMNS=0 blanked every line, a regression's list too):
# such a COLUMNS is taken as a log's 80 columns.
MIN_COLUMNS = 20


def _width() -> int | None:
    columns = os.environ.get("COLUMNS", "")
    return 80 if columns.isdigit() and int(columns) < MIN_COLUMNS else None  # None: rich's own reading


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """A reader that stopped reading (`| head -1`) is no failure: the rest of the output is
        dropped and the command ends with its own exit status (rich's default: exit 1)."""
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, (sys.stderr if self.stderr else sys.stdout).fileno())


console = _Console(stderr=True, width=_width())  # progress and run summaries: stdout stays for the run directory
out = _Console(width=_width())  # listings that are the command's answer


def waiting_line(event: dict) -> str:
    """A 'waiting' event (store/locks.py): 'ort-1.32: waiting for run pid 812 which is running
    ort-1.32's cells', or, for a row's artifacts, 'waiting for run pid 812 which is preparing bigloop'."""
    return (f"{event['env']}: " if "env" in event else "") + f"waiting for {event['for']}"


class RunProgress:
    """Turns run events into one progress bar over all cells on a terminal, and into plain lines in
    a log (a bar cannot be redrawn in a file): per environment, what it runs and what it reuses (an
    environment whose cells are all reused says nothing: a re-run that runs nothing reads so), a
    line per prepared artifact that took a while and per finished cell up to LOG_EACH cells; beyond,
    a line every QUIET seconds while artifacts are prepared, and a line per tenth of the cells with
    the counts so far (a suite of thousands of cells must not bury the results under thousands of
    progress lines, nor go minutes without one); a log also says, every HEARTBEAT seconds, which
    artifact it is still waiting for (a case exporting a reranker took two silent minutes), or, where
    another run holds its lock, for whom it waits (that run may be stopped: a bound ends the wait)."""

    LOG_EACH = 300
    SLOW = 5.0  # seconds: a prepared artifact this slow gets a line of its own in a log
    QUIET = 10.0  # seconds a big run's log may go without a line while it prepares
    HEARTBEAT = 30.0  # seconds any log may go without a line while an artifact is prepared

    def __init__(self, total: int):
        self.total, self.done, self.prepared = total, 0, 0
        self.preparing: dict[str, float] = {}  # artifact → when its prepare began
        self.waiting: dict[str, str] = {}  # artifact → the run whose lock it waits for
        self._stopped = threading.Event()
        self.counts: dict[str, int] = {}
        self.said_at = time.monotonic()
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, disable=not console.is_terminal)
        self.task = self.progress.add_task("starting", total=total)

    def __enter__(self) -> RunProgress:
        self.progress.start()
        if not console.is_terminal:  # a terminal's bar shows the time passing
            threading.Thread(target=self._heartbeat, name="progress-heartbeat", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopped.set()
        self.progress.stop()

    def _heartbeat(self) -> None:
        while not self._stopped.wait(self.HEARTBEAT / 6):
            preparing = dict(self.preparing)
            if preparing and time.monotonic() - self.said_at >= self.HEARTBEAT:
                name, since = min(preparing.items(), key=lambda kv: kv[1])
                more = f" and {len(preparing) - 1} more" if len(preparing) > 1 else ""
                who = self.waiting.get(name)
                self._say(f"waiting for {who} ({time.monotonic() - since:.0f} s)" if who else
                          f"still preparing {name}{more} ({time.monotonic() - since:.0f} s)")

    def _say(self, text: str) -> None:
        if console.is_terminal:
            self.progress.update(self.task, description=escape(text))
        else:
            console.print(escape(text), soft_wrap=True, highlight=False)
            self.said_at = time.monotonic()

    def _each(self, done: int) -> bool:
        """Whether a log gets this cell's line: every one in a small run, each tenth in a big one."""
        return self.total <= self.LOG_EACH or done * 10 // self.total != (done - 1) * 10 // self.total

    @staticmethod
    def _artifact(event: dict) -> str:
        """'minilm batch=4': the case and parameters a prepare event is about."""
        return row_words(event["case"], event["params"])

    def _waiting(self, event: dict) -> None:
        """Another run holds an artifact's or an environment's lock: said once for each holder, not
        for each row."""
        if "env" in event:
            self._say(waiting_line(event))
            return
        if event["for"] not in self.waiting.values():
            self._say(waiting_line(event))
        self.waiting[self._artifact(event)] = event["for"]

    def _prepared(self, event: dict) -> None:
        self.prepared += 1
        self.preparing.pop(self._artifact(event), None)
        self.waiting.pop(self._artifact(event), None)
        if self.total <= self.LOG_EACH:
            if event["seconds"] >= self.SLOW and not console.is_terminal:  # a timeout's or crash's too: never "prepared"
                self._say(f"could not prepare {self._artifact(event)} (after {event['seconds']:.1f} s): "
                          f"{event['error']}" if event.get("error") else
                          f"prepared {self._artifact(event)} in {event['seconds']:.1f} s")
        elif time.monotonic() - self.said_at >= self.QUIET:
            self._say(f"preparing artifacts: {self.prepared} of at most {event['of']} so far")

    def __call__(self, event: dict) -> None:
        kind = event["event"]
        if kind == "prepare":
            self.preparing.setdefault(self._artifact(event), time.monotonic())
        if kind == "prepare" and (console.is_terminal or self.total <= self.LOG_EACH):
            self._say(f"prepare {self._artifact(event)}")
        elif kind == "prepared":
            self._prepared(event)
        elif kind == "waiting":
            self._waiting(event)
        elif kind == "setup" and console.is_terminal:
            self._say(f"set up {event['env']}")
        elif kind == "ready" and event["to_run"]:
            took = f" (environment and its models ready in {event['setup_s']:.1f} s)" if event["setup_s"] >= 1 else ""
            reused = f", {event['reused']} reused" if event["reused"] else ""
            self._say(f"{event['env']}: {event['to_run']} cell{'s' * (event['to_run'] != 1)} to run{reused}{took}")
        elif kind == "start" and console.is_terminal:
            self._say(event["cell_id"])
        elif kind == "recorded":
            self.done += 1
            self.counts[event["status"]] = self.counts.get(event["status"], 0) + 1
            self.progress.advance(self.task)
            if console.is_terminal or not self._each(self.done):
                return
            if self.total <= self.LOG_EACH:
                line = f"[{self.done}/{self.total}] {event['status']} {event['cell_id']}"
            else:
                line = f"[{self.done}/{self.total}] " + ", ".join(f"{n} {s}" for s, n in sorted(
                    self.counts.items(), key=lambda kv: -kv[1]))
            console.print(escape(line), soft_wrap=True, highlight=False)
            self.said_at = time.monotonic()


# Digits after the point of a table cell's worst error: 1.54 is '1.54e+00', never '2e+00'.
TABLE_DIGITS = 2


def status_text(row: pd.Series) -> tuple[str, str]:
    word, style = SHORT.get(row["status"], (row["status"], ""))
    worst = worst_error(row, precision=TABLE_DIGITS) if row["status"] in JUDGED else None  # a skip measured nothing
    if worst:
        word = f"{word} {worst}"
    return with_marks(word, row), style


def styled(row: pd.Series) -> str:
    word, style = status_text(row)
    return f"[{style}]{escape(word)}[/]" if style else escape(word)


def fits(table: Table, target: Console = console) -> bool:
    """Whether the table prints without squeezing a column (a log file is 80 columns wide unless
    COLUMNS says otherwise)."""
    unbounded = target.options.update_width(10 ** 6)
    return Measurement.get(target, unbounded, table).maximum <= target.width


def results_table(frame: pd.DataFrame) -> Table:
    envs = env_order(frame)
    table = Table(show_lines=False, header_style="bold", pad_edge=False)
    table.add_column("case / profile")
    for env in envs:
        table.add_column(escape(env), no_wrap=True)
    for row_id, group in records_by_row(frame).items():
        by_env = {r["env"]: styled(r) for r in group}
        table.add_row(escape(row_id), *(by_env.get(e, "") for e in envs))
    return table


SHOWN = 30  # cells listed one by one, and cause groups per status, before "… and N more"


def _cell_line(r: pd.Series) -> str:
    worst = worst_error(r)
    if worst and worst[0].isdigit() and not bits_text(r):  # a number; NaN×n, Inf×n, '-inf expected, …' and bits say what they are
        worst = f"max_abs {worst}"
    rule = rule_text(r)  # judged by a rule: what it measured, and the worst slice, say why
    details = ", ".join(t for t in (rule or worst, drift_text(r), r["error"] if isinstance(r["error"], str) else None) if t)
    word, style = SHORT.get(r["status"], (r["status"], ""))
    return f"  [{style}]{word}[/] {escape(r['cell_id'])}" + (f"  {escape(one_line(details))}" if details else "")


def _cause_lines(cells: pd.DataFrame, status: str) -> list[str]:
    """One line per cause: how many cells, in which environments, a few of their rows. A cause
    is said in full (its paths too) where its cells' messages are one and the same."""
    word, style = SHORT[status]
    groups = sorted(cells.groupby(cells["error"].map(lambda error: cause(status, error))), key=lambda g: -len(g[1]))
    lines = [f"{len(cells)} {status} in {len(groups)} cause{'s' * (len(groups) != 1)}:"]
    for text, group in groups[:SHOWN]:
        if group["error"].nunique() == 1:  # nothing differs from cell to cell: its paths are the news
            text = cause(status, group["error"].iloc[0], paths=True)
        rows = list(dict.fromkeys(group["row_id"]))
        envs = ", ".join(dict.fromkeys(group["env"]))
        names = ", ".join(rows[:3]) + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")
        lines.append(f"  [{style}]{word} ×{len(group)}[/] {escape(text)} [dim]({escape(envs)}: {escape(names)})[/]")
    if len(groups) > SHOWN:
        lines.append(f"  … and {len(groups) - SHOWN} more causes")
    return lines


def results_lines(frame: pd.DataFrame, full_list: Path | None = None) -> list[str]:
    """What a log reader needs when the matrix is too wide: counts per environment, then
    look_lines."""
    lines = []
    for env in env_order(frame):
        cells = frame[frame["env"] == env]
        line = f"{env}: {summary_line(cells)}"
        if reason := not_run_reason(cells):
            line += f" ({reason})"
        lines.append(escape(line))
    return lines + look_lines(frame, full_list)


def look_lines(frame: pd.DataFrame, full_list: Path | None = None) -> list[str]:
    """Below the table or the counts: the failures (and crashes, timeouts, drift) one by one, worst
    error first; errors and refusals grouped by cause; every one of them in `full_list`
    (look_at.py), named at the end."""
    lines = []
    drifted = frame["drift_max_abs"].fillna(0).gt(0)
    single = frame[frame["status"].isin(ONE_BY_ONE) | (drifted & ~frame["status"].isin(BY_CAUSE))]
    if len(single):
        lines.append(f"{len(single)} cell{'s' * (len(single) != 1)} to look at:")
        order = single["status"].map({s: i for i, s in enumerate(ONE_BY_ONE)}).fillna(len(ONE_BY_ONE))
        lines += [_cell_line(r) for _, r in single.assign(_o=order).sort_values("_o", kind="stable").head(SHOWN).iterrows()]
        if len(single) > SHOWN:
            lines.append(f"  … and {len(single) - SHOWN} more")
    for status in BY_CAUSE:
        cells = frame[frame["status"] == status]
        if len(cells):
            lines += _cause_lines(cells, status)
    if full_list is not None and (len(single) or frame["status"].isin(BY_CAUSE).any()):
        lines.append(f"every one of them: {escape(str(full_list))}")
    skipped = frame[frame["status"] == "skipped"]  # not to look at, but never without its reason
    return lines + (_cause_lines(skipped, "skipped") if len(skipped) else [])


# Beyond this many rows (a suite run) the matrix is read in the report: the terminal gets the
# counts and the cells worth a look, and no time goes into measuring a table of thousands of rows.
TABLE_ROWS = 300


def print_results(frame: pd.DataFrame, target: Console = console, full_list: Path | None = None) -> None:
    for mismatch in version_mismatches(frame):
        target.print(escape(f"warning: {mismatch}"), soft_wrap=True, style="yellow")
    table = results_table(frame) if frame["row_id"].nunique() <= TABLE_ROWS else None
    shown = table is not None and fits(table, target)
    if shown:  # the table, and below it why its cells are red
        target.print(table)
    for line in (look_lines if shown else results_lines)(frame, full_list):
        target.print(line, soft_wrap=True)
    for line in known_issue_lines(frame):
        target.print(line, soft_wrap=True)


def uncovered_lines(frame: pd.DataFrame) -> list[str]:
    """The cells a strict CI gate fails on (fail, error, crash, timeout: a known issue's would be
    xfail), listed as `run` lists its findings; empty when there are none."""
    bad = frame[frame["status"].isin(REGRESSED)]
    if not len(bad):
        return []
    lines = [f"[bold red]{len(bad)} cell{'s' * (len(bad) != 1)} fail, err, crash or time out outside any known issue "
             f"(--strict):[/]"]
    lines += [_cell_line(r) for _, r in bad.head(SHOWN).iterrows()]
    return lines + ([f"  … and {len(bad) - SHOWN} more"] if len(bad) > SHOWN else [])


def known_issue_lines(frame: pd.DataFrame) -> list[str]:
    """A line per known issue that cells matched, naming them: an `xfail` in a table says which
    entry of the registry expected it (the same case may carry a TensorRT seed and an onnxruntime
    issue)."""
    matched = frame[frame["known_issue"].notna() & frame["status"].isin(["xfail", "xpass"])]
    lines = []
    for issue, cells in matched.groupby("known_issue", sort=False):
        counts = ", ".join(f"{n} {status}" for status, n in cells["status"].value_counts().items())
        rows = list(dict.fromkeys(cells["row_id"]))
        names = ", ".join(rows[:3]) + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")
        lines.append(escape(f"known issue {issue}: {counts} ({names} on {', '.join(dict.fromkeys(cells['env']))})"))
    return lines


def _side(row: pd.Series, side: str) -> dict:
    return {key.removesuffix(f"_{side}"): value for key, value in row.items() if key.endswith(f"_{side}")}


def _upgrade_rows(compared: pd.DataFrame) -> list[tuple[str, str, str, str, str, str, str, str]]:
    """(change, row, status A, status B, worst A, worst B, Δ max_abs, B against A) in the order a
    reader wants; each status with the marks the matrix gives it (⇡, ↯, ⚖, ≡)."""
    compared = compared.assign(_order=compared["change"].map(CHANGES.index)).sort_values(["_order", "row_id"])
    rows = []
    for _, r in compared.iterrows():
        a, b = _side(r, "a"), _side(r, "b")
        worst = [" ".join(t for t in (worst_error(x, 2), drift_text(x), needed_text(x) and f"({needed_text(x)})") if t)
                 for x in (a, b)]
        delta = f"{r['delta_max_abs']:+.2e}" if pd.notna(r["delta_max_abs"]) else ""
        against = r.get("a_vs_b")  # measured only where both sides kept outputs
        statuses = [with_marks(x["status"], x) if isinstance(x["status"], str) else str(x["status"]) for x in (a, b)]
        rows.append((r["change"], r["row_id"], *statuses, *worst, delta, against if isinstance(against, str) else ""))
    return rows


def print_upgrade(compared: pd.DataFrame, env_a: str, env_b: str, target: Console = out) -> None:
    table = Table(title=escape(f"{env_a} → {env_b}"), header_style="bold", pad_edge=False)
    for column in ("change", "row", env_a, env_b, "worst A", "worst B", "Δ max_abs", "B against A"):
        table.add_column(escape(column))
    colour = {"newly failing": "bold red", "newly supported, failing": "red", "newly passing": "green", "newly building": "cyan",
              "newly unsupported": "yellow", "newly supported": "green", "other changes": "magenta"}
    rows = _upgrade_rows(compared)
    target.print(escape(f"{env_a} → {env_b}: {gained_and_lost(compared['change'].value_counts().to_dict())}"),
                 soft_wrap=True)
    for change, *rest in rows:
        table.add_row(f"[{colour[change]}]{change}[/]" if change in colour else change, *(escape(x) for x in rest))
    if fits(table, target):
        target.print(table)
        return
    for change in CHANGES:
        group = [row for row in rows if row[0] == change]
        target.print(f"{change} ({len(group)}):", soft_wrap=True)
        for _, row_id, status_a, status_b, worst_a, worst_b, delta, against in group:
            numbers = f"  {worst_a or '—'} → {worst_b or '—'}" if worst_a or worst_b else ""
            against = f"; B against A: {against}" if against else ""
            target.print(escape(f"  {row_id}: {status_a} → {status_b}{numbers}{against}"), soft_wrap=True)


def print_timing(envs: list[str], rows: list[dict], factor: float, target: Console = out) -> None:
    """Speed across versions (report/timing.py): a table where it fits, else a line per row."""
    flagged = [c["flag"] for row in rows for c in row["cells"] if c and c["flag"]]
    target.print(escape(f"{len(rows)} rows timed; latency changes flagged: {flagged.count('slower')} slower, "
                        f"{flagged.count('faster')} faster (Mann-Whitney U over the timed inferences, p < "
                        f"{P_THRESHOLD}, and medians more than ×{factor:g} apart; their rows first)"),
                 soft_wrap=True)
    rows = sorted(rows, key=lambda row: not any(c and c["flag"] for c in row["cells"]))  # the flagged rows first
    table = Table(header_style="bold", pad_edge=False)
    table.add_column("row")
    for env in envs:
        table.add_column(escape(env))
    style = {"slower": "bold red", "faster": "green"}
    for row in rows:
        table.add_row(escape(row["row_id"]), *(f"[{style[c['flag']]}]{escape(timing_text(c))}[/]" if c and c["flag"]
                                               else escape(timing_text(c)) for c in row["cells"]))
    if fits(table, target):
        target.print(table)
        return
    for row in rows:
        target.print(escape(row["row_id"]), soft_wrap=True)
        for env, cell in zip(envs, row["cells"]):
            if cell:
                target.print(escape(f"  {env}: {timing_text(cell)}"), soft_wrap=True)


def _history(runs: list[tuple[str, pd.DataFrame]], cell_glob: str | None) -> list[tuple[str, list[str]]]:
    """(cell id, its styled status in each run, newest first) for the cells matching the glob."""
    by_run = [{r["cell_id"]: styled(r) for r in frame.to_dict("records")} for _, frame in runs]
    cells = sorted({cell for statuses in by_run for cell in statuses}, key=natural_key)
    return [(cell, [statuses.get(cell, "") for statuses in by_run]) for cell in cells
            if cell_glob is None or fnmatchcase(cell, cell_glob)]


def print_history(runs: list[tuple[str, pd.DataFrame]], cell_glob: str | None, target: Console = out) -> None:
    """A table, or where it does not fit the terminal (a CI log), one line per cell: its full id,
    then its status in each run, newest first."""
    rows = _history(runs, cell_glob)
    table = Table(header_style="bold", pad_edge=False)
    table.add_column("cell")
    for header in history_headers([run_id for run_id, _ in runs]):
        table.add_column(header, no_wrap=True)
    for cell, statuses in rows:
        table.add_row(escape(cell), *statuses)
    if fits(table, target):
        target.print(table)
        return
    target.print(escape("runs, newest first: " + ", ".join(run_id for run_id, _ in runs)), soft_wrap=True)
    for cell, statuses in rows:
        target.print(f"{escape(cell)}: " + " | ".join(s or "—" for s in statuses), soft_wrap=True, highlight=False)


def history_headers(run_ids: list[str]) -> list[str]:
    """Each run's column header: its id to the second (20261126T203444), or the whole id where two
    runs of the table started in the same second; with what follows the id (" (re-judged)")."""
    short = Counter(run_id[:15] for run_id in run_ids)
    return [run_id[:15] + run_id[len(run_id.split(" ")[0]):] if short[run_id[:15]] == 1 else run_id for run_id in run_ids]


def left_out_line(left_out: dict[str, dict[str, str]], run_json: Path) -> str | None:
    """'243 suite tests are not rows: bfloat16 tensor ×27, string tensor ×26, ... (each in run.json)'."""
    reasons = Counter(left_out_kind(why) for tests in left_out.values() for why in tests.values())
    if not reasons:
        return None
    said = ", ".join(f"{why} ×{n}" for why, n in reasons.most_common())
    return escape(f"{reasons.total()} suite tests are not rows: {said} (each named in {run_json}, 'left_out')")


def summary_line(frame: pd.DataFrame) -> str:
    counts = frame["status"].value_counts()
    return ", ".join(f"{n} {status}" for status, n in counts.items())


def totals_line(frame: pd.DataFrame) -> str:
    """'323 cells: 110 pass, … (209 reused from earlier runs, none run now)': a re-run that
    computed nothing must not read like one that did."""
    line = f"{len(frame)} cell{'s' * (len(frame) != 1)}: {summary_line(frame)}"
    reused = frame["reused"].fillna(False).astype(bool) if "reused" in frame else None
    if reused is not None and reused.any():
        ran = int((~reused & (frame["status"] != "skipped")).sum())
        line += f" ({int(reused.sum())} reused from earlier runs, {ran or 'none'} run now)"
    return line


DEFINITION_COLUMNS = ("name", "engine", "version", "backend", "gpu", "built from", "source")


def _definition(e) -> tuple[str, ...]:
    args = " ".join(f"{k}={v}" for k, v in e.build_args.items())
    origin = e.image or (f"images/{e.dockerfile} {args}" if e.dockerfile else " ".join(e.requirements))
    if e.backend == "host":
        origin = e.python or "the Python running trtmatrix"
    return (e.name, e.label, e.version or "as installed", e.backend, {True: "yes", "optional": "optional"}.get(e.gpu, ""),
            origin, e.source)


def print_definitions(envdefs: list, target: Console = out) -> None:
    """A table where it fits; in a narrow terminal or a log, a block per definition (a table of
    seven columns at 80 columns breaks every word)."""
    table = Table(header_style="bold", pad_edge=False)
    for column in DEFINITION_COLUMNS:
        table.add_column(column, overflow="fold")
    for e in envdefs:
        table.add_row(*(escape(str(x)) for x in _definition(e)))
    if fits(table, target):
        target.print(table)
        return
    for e in envdefs:
        name, *rest = _definition(e)
        target.print(f"[bold]{escape(name)}[/]", soft_wrap=True)
        for column, value in zip(DEFINITION_COLUMNS[1:], rest):
            if value:
                target.print(f"  {column}: {escape(str(value))}", soft_wrap=True, highlight=False)


def checks_table(checks: list) -> Table:
    table = Table(header_style="bold", pad_edge=False)
    for column in ("name", "image", "present", "pullable", "runnable here"):
        table.add_column(column, overflow="fold")
    for c in checks:
        runnable = "[green]yes[/]" if c.runnable == "yes" else f"[red]{escape(c.runnable)}[/]"
        table.add_row(escape(c.env), escape(c.image), "yes" if c.present else "no", escape(c.pullable), runnable)
    return table
