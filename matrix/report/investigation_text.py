"""What explain and precision print in the terminal: their findings as tables and ready text."""

from __future__ import annotations

import json
import shlex

import pandas as pd
from rich.table import Table

from .console import escape
from .error_text import worst_error

# Rows of the explain table: every node of a small model; around the first divergent one otherwise.
SHOWN_NODES, CONTEXT = 30, 8


def _yes_no(value) -> str:
    return "—" if value is None or value is pd.NA else ("yes" if value else "NO")


def _shown_nodes(nodes: pd.DataFrame, first: dict | None, every: bool = False) -> pd.DataFrame:
    """The observed nodes (`every`: the Constant, Shape and integer nodes nothing was measured on,
    too) of a small model; around the first divergent one otherwise."""
    if not every:
        nodes = nodes[nodes["within"].notna()]
    if len(nodes) <= SHOWN_NODES:
        return nodes
    position = nodes["order"].searchsorted(first["order"]) if first else 0
    return nodes.iloc[max(0, position - CONTEXT):position + CONTEXT + 1]


def hidden_line(nodes: pd.DataFrame, every: bool) -> str | None:
    """What the table left out, and how to see it."""
    unobserved = nodes[nodes["within"].isna()]
    if every or unobserved.empty:
        return None
    kinds = ", ".join(unobserved["op_type"].value_counts().index[:6])
    count = f"{len(unobserved)} node{'s' * (len(unobserved) != 1)}"
    return f"{count} with nothing to measure (no floating-point output: {kinds}) not shown: --all shows them"


def _jump_text(value) -> str:
    if pd.isna(value):
        return "—"
    return "∞" if value == float("inf") else ("none: exact" if value == 0 else f"×{value:.3g}")


def explain_lines(nodes: pd.DataFrame, first: dict | None, every: bool = False) -> list[str]:
    """The table as lines, where it does not fit the terminal (a CI log): names never cut."""
    lines = []
    for _, row in _shown_nodes(nodes, first, every).iterrows():
        marked = "→ " if first is not None and row["order"] == first["order"] else "  "
        state = {True: "within", False: "OUT of tolerance"}.get(row["within"], "not observed")
        inputs = "inputs within" if row["inputs_within"] else "an input out of tolerance"
        extra = "; ".join(t for t in (row["fp16_risk"] and f"FP16 risk: {row['fp16_risk']}", row["note"]) if t)
        lines.append(f"{marked}{row['order']} {row['node']} ({row['op_type']}): {worst_error(row) or '—'} "
                     f"(jump {_jump_text(row['jump'])}), {state}, {inputs}" + (f"; {extra}" if extra else ""))
    return lines


def explain_table(nodes: pd.DataFrame, first: dict | None, every: bool = False) -> Table:
    fp16 = bool(nodes["fp32"].notna().any())  # an FP16 profile: which nodes keep_fp32 held in FP32
    risky = fp16 and bool((nodes["fp16_risk"] != "").any())  # what the FP16 forecast flagged before any build
    table = Table("#", "node", "op", "worst error", "max_rel", "jump", "within", "inputs within",
                  *(["FP32"] if fp16 else []), *(["FP16 risk (forecast)"] if risky else []), "note",
                  title="every intermediate tensor against float64, in topological order", title_justify="left")
    shown = _shown_nodes(nodes, first, every)
    for _, row in shown.iterrows():
        marked = first is not None and row["order"] == first["order"]
        rel = "—" if pd.isna(row["max_rel"]) else f"{row['max_rel']:.1e}"
        table.add_row(str(row["order"]), escape(row["node"]), escape(row["op_type"]), worst_error(row) or "—", rel,
                      _jump_text(row["jump"]), _yes_no(row["within"]), _yes_no(row["inputs_within"]),
                      *([_yes_no(row["fp32"]).replace("NO", "")] if fp16 else []),
                      *([escape(row["fp16_risk"])] if risky else []),
                      escape(row["note"]), style="bold red" if marked else None)
    if len(shown) < len(nodes):
        table.caption = f"{len(shown)} of {len(nodes)} nodes shown: the full table is in layers.parquet"
    return table


def nodes(count: int) -> str:
    """'1 node', '5 nodes'."""
    return f"{count} node{'s' * (count != 1)}"


def first_divergent_line(finding: dict) -> str:
    first, spread = finding["first_divergent"], finding.get("spread")
    if spread is not None:
        return (f"{finding['cell']} ({finding['verdict']}): no single node diverges; the error is rounding spread "
                f"over the model, growing node after node (the largest jump over what a node's inputs handed it is "
                f"×{spread['largest_jump']:.3g}, at {spread['at']}; a divergent node jumps by more than "
                f"×{spread['factor']:g}). Observed {finding['observed']}, {nodes(finding['nodes'])}")
    if first is None:
        return (f"{finding['cell']} ({finding['verdict']}): no node leaves tolerance with all its inputs within it "
                f"(observed {finding['observed']}, {nodes(finding['nodes'])})")
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


def fixes_to_paste(name: str, profile: dict, model: str = "model.onnx") -> str:
    """The layers to keep in FP32 three ways: the matrix profile, trtexec flags and Polygraphy
    options. The names are ONNX node names; TensorRT's ONNX parser names a layer after its node,
    but fusion may rename it: the next trtmatrix run checks with the engine inspector that the
    layers ran in FP32 (precision_check). `model`: the case's ONNX file, as the commands name it."""
    names, model = list(profile["keep_fp32"]), shlex.quote(model)
    trtexec = (f"trtexec --onnx={model} --fp16 --precisionConstraints=obey "
               f"--layerPrecisions={shlex.quote(','.join(f'{n}:fp32' for n in names))} "
               f"--layerOutputTypes={shlex.quote(','.join(f'{n}:fp32' for n in names))}")
    polygraphy = (f"polygraphy run {model} --trt --fp16 --precision-constraints obey --layer-precisions "
                  + " ".join(shlex.quote(f"{n}:float32") for n in names))
    return "\n".join(["# the matrix file:", precision_profile(name, profile), "",
                      "# trtexec (ONNX node names; the next run's engine inspector confirms the layer names):", trtexec, "",
                      "# Polygraphy:", polygraphy])
