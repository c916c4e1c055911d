"""`trtmatrix cache`: what the cache keeps, and freeing it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import ConfigOpt, _fail, app


@app.command("cache")
def cache_cmd(free: Annotated[Optional[list[str]], typer.Option(
                  "--free", metavar="PART", help="Remove this part of the cache (repeatable; all: every part).")] = None,
              config: ConfigOpt = Path("matrix.toml"),
              as_json: Annotated[bool, typer.Option("--json", help="Print the sizes as JSON (bytes).")] = False) -> None:
    """How much trtmatrix's cache (the matrix file's cache_dir, else the user's) holds, part by part, and what freeing
    each costs; --free removes parts. Every part is made again when needed: freeing one costs time
    at the next run, never a result (run folders keep their own outputs). Refused while a run or an
    investigation holds one of the cache's locks."""
    import json

    from filelock import Timeout

    from ..config import load_config
    from ..report.console import escape, out
    from ..store.cache import cache_folder
    from ..store.cache_tag import not_a_cache
    from ..store.cache_usage import PARTS, free as free_parts, size_text, usage
    from ..store.locks import IN_USE, cache_lock, held_cache_locks

    if not config.is_file():
        _fail(f"{config}: no matrix file (its cache_dir, or the user's cache without one, is the cache)")
    cache = cache_folder(config.resolve().parent, load_config(config).run.cache_dir)
    if free:
        if problem := not_a_cache(cache):  # `cache_dir = "."`: the project's own results/ and venvs/
            _fail(problem)
        in_use = cache_lock(cache, IN_USE)  # held alone while freeing: a run that starts meanwhile waits
        try:
            in_use.acquire(timeout=0)
        except Timeout:  # shared by a run or an investigation at work
            pass
        try:
            if held := [name for name in held_cache_locks(cache) if not (name == IN_USE and in_use.is_locked)]:
                _fail(f"{cache} is in use: a run or an investigation holds {', '.join(held[:3])}; free it when none "
                      "is going (its cells would be lost to the next run)")
            freed = free_parts(cache, free)
        except ValueError as exc:
            _fail(str(exc))
        finally:
            in_use.release()
        if as_json:
            typer.echo(json.dumps({"cache": str(cache), "freed": freed}))
            return
        for part, count in freed.items():
            out.print(escape(f"freed {part}: {size_text(count)}"), soft_wrap=True, highlight=False)
        out.print(escape(f"freed {size_text(sum(freed.values()))} of {cache}"), soft_wrap=True, highlight=False)
        return
    sizes = usage(cache)
    if as_json:
        typer.echo(json.dumps({"cache": str(cache), "parts": sizes, "total": sum(sizes.values())}))
        return
    for part, count in sizes.items():
        out.print(escape(f"{part:<15} {size_text(count):>9}  {PARTS[part]}"), soft_wrap=True, highlight=False)
    out.print(escape(f"{'total':<15} {size_text(sum(sizes.values())):>9}  in {cache}"), soft_wrap=True, highlight=False)
