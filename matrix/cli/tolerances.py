"""`trtmatrix tolerances`: tolerances from measurements."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import CasesOpt, RunArg, RunsConfigOpt, _check_output, _fail, _matrix_file, _run_dir, _write_output, app
from .runs import _say_rejudged


tolerances_app = typer.Typer(no_args_is_help=True, help="Tolerances from measurements.")


app.add_typer(tolerances_app, name="tolerances")


@tolerances_app.command("suggest")
def tolerances_suggest(
        run_ref: RunArg = None, config: RunsConfigOpt = None,
        trusted: Annotated[list[str], typer.Option(metavar="ENV", help="An environment whose results you trust "
                                                                    "(repeatable).")] = ...,
        case: CasesOpt = None,
        factor: Annotated[float, typer.Option(min=1.0, help="Safety factor: atol = factor × the atol the trusted cells "
                                                             "needed (a rule: 1 − factor × their largest gap of cosine "
                                                             "from 1).")] = 2.0,
        output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the TOML here (default: stdout).")] = None,
) -> None:
    """Per case and profile, the tolerance the trusted environments need (times --factor, never
    below their measured noise) — for a profile judged by an acceptance rule, the rule's cosine
    threshold — as TOML in the matrix file's per-case layout; re-judge a run with it by
    `trtmatrix report RUN --tolerances FILE`."""
    from ..config import load_config
    from ..report.tolerance_suggestions import suggest, to_toml
    from ..store import read_run

    if not math.isfinite(factor):
        _fail(f"--factor {factor}: give a finite number, at least 1")
    _check_output("-o", output, config)
    run_dir = _run_dir(config, run_ref)
    matrix = load_config(config) if (config := _matrix_file(config)) else None  # its rules, where there is one
    rules = {(name, profile): rule for name, entry in matrix.cases.items() for profile, rule in entry.accept.items()} \
        if matrix else {}
    try:
        found = suggest(run_dir, read_run(run_dir), trusted, factor, case, rules)
    except ValueError as exc:
        _fail(str(exc))
    text = to_toml(found, run_dir.name, trusted, factor)
    if note := _say_rejudged(run_dir):  # its verdicts and tolerances are a what-if's (issue 41, sweep 19 M12)
        text = f"# {note}\n{text}"
    if output is None:
        typer.echo(text)
        return
    _write_output("-o", output, lambda target: target.write_text(text))
    made = sum(s.atol is not None or s.rule is not None for s in found)
    typer.echo(f"{made} suggestions written to {output}" if made else
               f"no suggestion: {output} holds only the reasons (re-judged with it, a run keeps the matrix file's "
               "tolerances)", err=True)
