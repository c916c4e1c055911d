"""A stored result's verdict under given tolerances, rules and comparison code, kept beside it:
an unchanged re-run of thousands of cells reads one small file per cell instead of loading and
comparing every output again. It lives in the result's own folder, which a re-run of the cell
replaces whole, so a judgement never outlives the outputs it judged."""

from __future__ import annotations

import json
from pathlib import Path

from . import write_text_atomically


def _file(directory: Path, key: str) -> Path:
    return directory / f"judgement-{key[:16]}.json"


def stored_judgement(directory: Path, key: str) -> tuple[str, dict] | None:
    try:
        stored = json.loads(_file(directory, key).read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(stored, dict) and stored.get("verdict") in ("pass", "fail") and isinstance(stored.get("fields"), dict)):
        return None  # not what store_judgement wrote: judged again
    return stored["verdict"], stored["fields"]


def store_judgement(directory: Path, key: str, verdict: str, fields: dict) -> None:
    """JSON keeps NaN and ±Infinity (Python's json writes and reads them); numpy scalars become numbers."""
    text = json.dumps({"verdict": verdict, "fields": fields}, default=lambda value: value.item())
    write_text_atomically(_file(directory, key), text)
