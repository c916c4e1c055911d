"""What a person sees in the terminal: a progress bar while a run goes, a compact table after."""

from __future__ import annotations

from fnmatch import fnmatchcase

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .upgrade import env_order

SHORT = {"pass": ("pass", "green"), "fail": ("FAIL", "bold red"), "error": ("ERR", "yellow"),
         "crash": ("CRASH", "bold magenta"), "timeout": ("T/O", "magenta"), "skipped": ("skip", "dim"),
         "xfail": ("xfail", "blue"), "xpass": ("XPASS", "bold cyan")}

console = Console(stderr=True)  # progress and run summaries: stdout stays for the run directory
out = Console()  # listings that are the command's answer


class RunProgress:
    """Turns run events into one progress bar over all cells."""

    def __init__(self, total: int):
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console)
        self.task = self.progress.add_task("starting", total=total)

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def __call__(self, event: dict) -> None:
        kind = event["event"]
        if kind == "prepare":
            params = " ".join(f"{k}={v}" for k, v in event["params"].items())
            self.progress.update(self.task, description=f"prepare {event['case']} {params}".strip())
        elif kind == "setup":
            self.progress.update(self.task, description=f"set up {event['env']}")
        elif kind == "start":
            self.progress.update(self.task, description=event["cell_id"])
        elif kind == "recorded":
            self.progress.advance(self.task)


def status_text(row: pd.Series) -> tuple[str, str]:
    word, style = SHORT.get(row["status"], (row["status"], ""))
    if row["status"] in ("pass", "fail") and pd.notna(row["max_abs"]):
        word = f"{word} {row['max_abs']:.0e}"
    return word, style


def styled(row: pd.Series) -> str:
    word, style = status_text(row)
    return f"[{style}]{word}[/]" if style else word


def results_table(frame: pd.DataFrame) -> Table:
    envs = env_order(frame)
    table = Table(show_lines=False, header_style="bold", pad_edge=False)
    table.add_column("case / profile")
    for env in envs:
        table.add_column(env, no_wrap=True)
    for row_id, group in frame.groupby("row_id", sort=False):
        by_env = {r["env"]: styled(r) for _, r in group.iterrows()}
        table.add_row(row_id, *(by_env.get(e, "") for e in envs))
    return table


def upgrade_table(compared: pd.DataFrame, env_a: str, env_b: str) -> Table:
    table = Table(title=f"{env_a} → {env_b}", header_style="bold", pad_edge=False)
    for column in ("change", "row", env_a, env_b, "max_abs A", "max_abs B", "Δ max_abs"):
        table.add_column(column)
    order = ["newly failing", "newly passing", "unchanged", "not comparable"]
    compared = compared.assign(_order=compared["change"].map(order.index)).sort_values(["_order", "row_id"])
    colour = {"newly failing": "bold red", "newly passing": "green"}
    for _, r in compared.iterrows():
        numbers = [f"{v:.2e}" if pd.notna(v) else "" for v in (r["max_abs_a"], r["max_abs_b"], r["delta_max_abs"])]
        change = f"[{colour[r['change']]}]{r['change']}[/]" if r["change"] in colour else r["change"]
        table.add_row(change, r["row_id"], str(r["status_a"]), str(r["status_b"]), *numbers)
    return table


def history_table(runs: list[tuple[str, pd.DataFrame]], cell_glob: str | None) -> Table:
    table = Table(header_style="bold", pad_edge=False)
    table.add_column("cell")
    for run_id, _ in runs:
        table.add_column(run_id[:15], no_wrap=True)
    by_run = [{r["cell_id"]: styled(r) for _, r in frame.iterrows()} for _, frame in runs]
    cells = sorted({cell for statuses in by_run for cell in statuses})
    for cell in cells:
        if cell_glob is None or fnmatchcase(cell, cell_glob):
            table.add_row(cell, *(statuses.get(cell, "") for statuses in by_run))
    return table


def summary_line(frame: pd.DataFrame) -> str:
    counts = frame["status"].value_counts()
    return ", ".join(f"{n} {status}" for status, n in counts.items())


def definitions_table(envdefs: list) -> Table:
    table = Table(header_style="bold", pad_edge=False)
    for column in ("name", "engine", "version", "backend", "gpu", "built from", "source"):
        table.add_column(column, overflow="fold")
    for e in envdefs:
        args = " ".join(f"{k}={v}" for k, v in e.build_args.items())
        origin = e.image or (f"images/{e.dockerfile} {args}" if e.dockerfile else " ".join(e.requirements))
        table.add_row(e.name, e.engine, e.version, e.backend, "yes" if e.gpu else "", origin, e.source)
    return table


def checks_table(checks: list) -> Table:
    table = Table(header_style="bold", pad_edge=False)
    for column in ("name", "image", "present", "pullable", "runnable here"):
        table.add_column(column, overflow="fold")
    for c in checks:
        runnable = "[green]yes[/]" if c.runnable == "yes" else f"[red]{c.runnable}[/]"
        table.add_row(c.env, c.image, "yes" if c.present else "no", c.pullable, runnable)
    return table
