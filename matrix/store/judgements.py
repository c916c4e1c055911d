"""A stored result's verdict under given tolerances, rules and comparison code, kept beside it:
an unchanged re-run of thousands of cells reads one small file per cell instead of loading and
comparing every output again. It lives in the result's own folder, and its key names the outputs'
digest: a judgement never stands for other outputs, even where another run ran the cell again
meanwhile (store/held_results.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from . import write_text_atomically


def _file(directory: Path, key: str) -> Path:
    return directory / f"judgement-{key[:16]}.json"


def _seal(key: str, verdict: str, fields: dict) -> str:
    """What the judgement says, bound to its key: a file edited or damaged since (a verdict turned,
    its numbers left) no longer matches, and is judged again rather than served."""
    text = json.dumps([key, verdict, fields], sort_keys=True, default=lambda value: value.item())
    return hashlib.sha256(text.encode()).hexdigest()


def stored_judgement(directory: Path, key: str) -> tuple[str, dict] | None:
    try:
        stored = json.loads(_file(directory, key).read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(stored, dict) and stored.get("verdict") in ("pass", "fail") and isinstance(stored.get("fields"), dict)
            and stored.get("seal") == _seal(key, stored["verdict"], stored["fields"])):
        return None  # not what store_judgement wrote: judged again
    return stored["verdict"], stored["fields"]


def store_judgement(directory: Path, key: str, verdict: str, fields: dict) -> None:
    """JSON keeps NaN and ±Infinity (Python's json writes and reads them); numpy scalars become numbers.
    None kept where another run has emptied the folder to run the cell again."""
    fields = json.loads(json.dumps(fields, default=lambda value: value.item()))  # as it will be read back
    text = json.dumps({"verdict": verdict, "fields": fields, "seal": _seal(key, verdict, fields)})
    try:
        write_text_atomically(_file(directory, key), text)
    except FileNotFoundError:
        pass
