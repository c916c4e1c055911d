"""Which precision a reduced-precision cell really ran in, said on the cell (issue 40, point 6).

onnxruntime's CPU provider runs the nodes of an FP16 copy that lack FP16 kernels in float32, behind
Casts it inserts (worker/engines/onnxruntime_engine.py reads it from a profiled inference): a cell
says which nodes ran wider, and the FP16 forecast's risky nodes are named on it with what ran them.
A cell whose copy holds no FP16 value at all is not that precision's pass.
"""

from __future__ import annotations

import re


WIDER = "ran in float32 or double: {} of {} nodes ({})"
_WIDER = re.compile(r"ran in float32 or double: (\d+) of (\d+) nodes")


def every_node_wider(text) -> bool:
    """Whether precision_text said that no node computed in the profile's precision (onnxruntime ran
    them all in float32: an FP16 cell of FP16-rounded weights, float32 arithmetic)."""
    found = _WIDER.match(text) if isinstance(text, str) else None
    return bool(found) and found[1] == found[2]


def _counts(wider: dict) -> str:
    return ", ".join(f"{op} {count}" for op, count in sorted(wider.items(), key=lambda kv: -kv[1])[:6])


def not_converted(facts: dict | None, precision: str) -> str | None:
    """The reason a cell did not test its profile's precision at all: its FP16 copy holds no FP16
    value (a DOUBLE model, which the converter leaves as it is), or None. FP16 weights computed in
    float32 are the FP16 copy as deployed: said by precision_text, not refused."""
    if not facts or facts.get("reduced_values", 1):
        return None
    if facts.get("module"):  # the torch engine's: the module itself, made `module.to(dtype)`
        return (f"the module holds no floating parameter, buffer or input, so nothing of it is {precision.upper()}: "
                "this profile's precision was not tested")
    return (f"the {precision.upper()} copy holds no {precision.upper()} value (the converter turns the float32 values "
            f"nodes compute or hold; this model has none): this profile's precision was not tested")


def precision_text(ran: dict | None, forecast: dict | None) -> str | None:
    """'ran in float32: 3 of 10 nodes (ReduceSum 1, Sqrt 1, Div 1); forecast: ReduceSum_3 sum of
    squares reaches 1.15e+05 — ran in float32 here' — or None where everything ran as asked."""
    if not ran:
        return None
    wider = ran.get("wider") or {}
    said = []
    if wider:
        total = sum(wider.values()) + ran.get("reduced", 0)
        said.append(WIDER.format(sum(wider.values()), total, _counts(wider)))
    wider_nodes, reduced_nodes = set(ran.get("wider_nodes") or ()), set(ran.get("reduced_nodes") or ())
    for risk in (forecast or {}).get("risky", [])[:3]:
        how = ("ran in float32 here" if risk.get("name") in wider_nodes else "ran in reduced precision here"
               if risk.get("name") in reduced_nodes else "not run under its name here (fused, or folded into a constant)")
        said.append(f"forecast: {risk['node']} ({risk['op_type']}) {'; '.join(risk['reasons'])} — {how}")
    return "; ".join(said) or None
