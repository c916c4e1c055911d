"""What investigations found, kept in the run folder they were asked about:
`<run>/<kind>/<cell or row id, "/" as "__">/<kind>.json` (+ tables as parquet), where kind is
explain, bisect or precision. The report shows each in the details of the cells it concerns:
a finding with "cell" belongs to that cell, one with "row" to every cell of the row.
"""

from __future__ import annotations

import json
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
    """{kind: [finding, ...]} of this run folder."""
    return {kind: [json.loads(path.read_text()) for path in sorted((run_dir / kind).glob(f"*/{kind}.json"))]
            for kind in KINDS}
