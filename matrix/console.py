"""What a person sees in the terminal: a progress bar while a run goes, a compact table after."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

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


def results_table(frame: pd.DataFrame) -> Table:
    envs = list(pd.unique(frame["env"]))
    table = Table(show_lines=False, header_style="bold", pad_edge=False)
    table.add_column("case / profile")
    for env in envs:
        table.add_column(env, no_wrap=True)
    for row_id, group in frame.groupby("row_id", sort=False):
        by_env = {r["env"]: status_text(r) for _, r in group.iterrows()}
        table.add_row(row_id, *(f"[{s}]{w}[/]" if s else w for w, s in (by_env.get(e, ("", "")) for e in envs)))
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
