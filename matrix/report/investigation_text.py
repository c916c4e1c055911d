"""What explain and precision print in the terminal: their findings as tables and ready text."""

from __future__ import annotations

import json

import pandas as pd
from rich.table import Table

from .console import escape
from .error_text import worst_error

# Rows of the explain table: every node of a small model; around the first divergent one otherwise.
SHOWN_NODES, CONTEXT = 30, 8


def _yes_no(value) -> str:
    return "—" if value is None or value is pd.NA else ("yes" if value else "NO")


def explain_table(nodes: pd.DataFrame, first: dict | None) -> Table:
    fp16 = bool(nodes["fp32"].notna().any())  # an FP16 profile: which nodes keep_fp32 held in FP32
    table = Table("#", "node", "op", "worst error", "max_rel", "within", "inputs within", *(["FP32"] if fp16 else []),
                  "note", title="every intermediate tensor against float64, in topological order", title_justify="left")
    shown = nodes
    if len(nodes) > SHOWN_NODES:
        centre = first["order"] if first else 0
        shown = nodes[(nodes["order"] >= centre - CONTEXT) & (nodes["order"] <= centre + CONTEXT)]
    for _, row in shown.iterrows():
        marked = first is not None and row["order"] == first["order"]
        rel = "—" if pd.isna(row["max_rel"]) else f"{row['max_rel']:.1e}"
        table.add_row(str(row["order"]), escape(row["node"]), escape(row["op_type"]), worst_error(row) or "—", rel,
                      _yes_no(row["within"]), _yes_no(row["inputs_within"]),
                      *([_yes_no(row["fp32"]).replace("NO", "")] if fp16 else []),
                      escape(row["note"]), style="bold red" if marked else None)
    if len(shown) < len(nodes):
        table.caption = f"{len(shown)} of {len(nodes)} nodes shown: the full table is in layers.parquet"
    return table


def first_divergent_line(finding: dict) -> str:
    first = finding["first_divergent"]
    if first is None:
        return (f"{finding['cell']} ({finding['verdict']}): no node leaves tolerance with all its inputs within it "
                f"(observed {finding['observed']}, {finding['nodes']} nodes)")
    error = "NaN/Inf" if first["max_abs"] in ("inf", None) else f"{first['max_abs']:.2e}"
    return (f"first divergent node: {first['node']} ({first['op_type']}, node {first['order']} of {finding['nodes']}), "
            f"max_abs {error} with its inputs within tolerance (observed {finding['observed']})")


def precision_profile(name: str, profile: dict) -> str:
    """A profile ready to paste into the matrix file."""
    lines = [f"[profiles.{name}]", f'precision = "{profile["precision"]}"']
    if profile.get("optimization", "on") != "on":
        lines.append(f'optimization = "{profile["optimization"]}"')
    names = ", ".join(json.dumps(n) for n in profile["keep_fp32"])  # a JSON string is a TOML string
    lines.append(f"keep_fp32 = [{names}]")
    return "\n".join(lines)
