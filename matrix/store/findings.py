"""What investigations found, kept in the run folder they were asked about:
`<run>/<kind>/<cell or row id, "/" as "__">/<kind>.json` (+ tables as parquet), where kind is
explain, bisect or precision. The report shows each in the details of the cells it concerns:
a finding with "cell" belongs to that cell, one with "row" to every cell of the row.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from . import replace_atomically

KINDS = ("explain", "bisect", "precision", "repro")


def finding_dir(run_dir: Path, kind: str, item: str) -> Path:
    return run_dir / kind / item.replace("/", "__")


def write_finding(run_dir: Path, kind: str, item: str, finding: dict,
                  tables: dict[str, pd.DataFrame] | None = None) -> Path:
    """Tables first, the JSON last: a finding that is listed is complete."""
    folder = finding_dir(run_dir, kind, item)
    folder.mkdir(parents=True, exist_ok=True)
    for name, table in (tables or {}).items():
        replace_atomically(folder / f"{name}.parquet", lambda tmp, t=table: t.to_parquet(tmp, index=False))
    target = folder / f"{kind}.json"
    replace_atomically(target, lambda tmp: tmp.write_text(json.dumps(finding, indent=1)))
    return target


def read_findings(run_dir: Path) -> dict[str, list[dict]]:
    """{kind: [finding, ...]} of this run folder, each with its file as "_file"; a file that is not
    a finding (damaged, hand-edited) is left out with a warning naming it."""
    found: dict[str, list[dict]] = {}
    for kind in KINDS:
        found[kind] = []
        for path in sorted((run_dir / kind).glob(f"*/{kind}.json")):
            try:
                finding = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                finding = exc
            if isinstance(finding, dict):
                found[kind].append({**finding, "_file": str(path)})
            else:
                print(f"warning: {path}: not a finding trtmatrix wrote; left out of the report", file=sys.stderr, flush=True)
    return found
