"""A known issue's pattern observed on the cell's own engine: the cell measures only its graph
outputs, so where a failing output the pattern reaches also reads a node beside the pattern, the
pattern's own output is made a graph output (the model's outputs kept, so the engine computes the
same graph) and held against its float64 value, and so is what the pattern reads. Off where what it
reads is right: the known issue is evidenced; right, or off already before it: the failure is
something else (issue 41, sweep 5 #3; sweep 12 E7).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pandas as pd

from ..compare import compare_runs, settle
from ..reference.float64_graph import float64_values
from ..sources.fault_patterns import FaultPattern, producer_of
from ..worker.files import save_arrays


def pattern_tensors(ran: onnx.ModelProto, model: onnx.ModelProto, fault: FaultPattern) -> list[str]:
    """The outputs of the pattern's last nodes (those of its `op`) in the model the cell ran (its
    FP16 copy, where the engine runs one) that the model itself computes too: a copy's own Casts
    have no float64 value of the model."""
    produced = {name for node in model.graph.node for name in node.output}
    return [name for node in fault.nodes_in(ran) for name in node.output if name in produced]


def pattern_inputs(ran: onnx.ModelProto, model: onnx.ModelProto, fault: FaultPattern) -> list[str]:
    """The values the pattern's first node reads (the `after` node's, where the fault names one) that
    the model computes: a failure already there comes before the pattern (issue 41, sweep 12 E7: a
    CumSum's cancellation credited to the Pad → MaxPool fusion after it)."""
    producers = {name: node for node in ran.graph.node for name in node.output}
    produced = {name for node in model.graph.node for name in node.output}
    read = []
    for node in fault.nodes_in(ran):
        first = node.input[0] if node.input else ""
        if fault.after and (after := producer_of(first, producers)) is not None and after.input:
            first = after.input[0]
        read.append(first)
    return [name for name in dict.fromkeys(read) if name in produced]


def write_observed_copy(model: onnx.ModelProto, inputs: Path, tensors: list[str], folder: Path,
                        read: list[str]) -> dict[str, Path]:
    """An ONNX-file case (`onnx`, `inputs`, `expected`: float64 values) of `model` with `tensors` and
    what the pattern reads (`read`) added to its graph outputs; written into `folder`."""
    if not tensors:
        raise ValueError("the pattern's nodes are the FP16 copy's own: the model has no float64 value of them")
    tensors = list(dict.fromkeys([*tensors, *read]))
    with np.load(inputs) as data:
        values = float64_values(model, dict(data)).values
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    typed = {v.name: v for v in [*onnx.shape_inference.infer_shapes(model).graph.value_info, *copy.graph.output]}
    if missing := [name for name in tensors if name not in values or name not in typed]:
        raise ValueError(f"no float64 value or no inferred type for {', '.join(missing)}")
    # an output with no float64 value (a com.microsoft op after the pattern) is not the trial's to judge (sweep 19 M19)
    kept = [o for o in copy.graph.output if o.name in values]
    del copy.graph.output[:]
    copy.graph.output.extend(kept)
    outputs = {o.name for o in copy.graph.output}
    copy.graph.output.extend([typed[name] for name in tensors if name not in outputs])
    folder.mkdir(parents=True, exist_ok=True)
    files = {"onnx": folder / "model.onnx", "inputs": inputs, "expected": folder / "expected.npz"}
    onnx.save(copy, str(files["onnx"]))
    save_arrays(files["expected"], {o.name: values[o.name] for o in copy.graph.output})
    return files


def observation(row: pd.Series, tensors: list[str], inputs: list[str], changed: str | None = None,
                explains: bool | None = None) -> dict:
    """What the trial of an observed copy (its record) says of the pattern's tensors (column
    `fault_observed`): {"tensors", "off": those out of the cell's tolerance, "max_abs"}, with
    "inputs_off" and "inputs_max_abs" where what the pattern reads (pattern_inputs) was off already,
    "changed" (computed_otherwise) where the copy's own outputs are not the cell's, and "explains"
    (pattern_explains); or {"tensors", "error"} where the trial did not run or was not judged."""
    if row["verdict"] not in ("pass", "fail"):
        return {"tensors": tensors, "error": f"the observed copy is {row['verdict']}: {row['error']}"}
    measured = {o["name"]: o for o in json.loads(row["outputs"]) if o["name"] in [*tensors, *inputs]}
    seen = {"tensors": tensors, "off": [name for name in tensors if measured[name]["mismatch_frac"] > 0],
            "max_abs": max(float(measured[name]["max_abs"]) for name in tensors)}
    if inputs_off := [name for name in inputs if measured[name]["mismatch_frac"] > 0]:
        seen.update(inputs_off=inputs_off)
    if inputs:  # what the pattern reads was off by this much already, whether beyond the tolerance or not
        seen.update(inputs_max_abs=max(float(measured[name]["max_abs"]) for name in inputs))
    return {**seen, **({"changed": changed} if changed else {}), **({"explains": explains} if explains is not None else {})}


def pattern_explains(model: onnx.ModelProto, inputs: dict[str, np.ndarray], tensors: list[str], seen: Path,
                     reference: dict[str, np.ndarray], atol: float, rtol: float, mask: np.ndarray | None,
                     cell: dict[str, np.ndarray], decided: dict[str, np.ndarray] | None = None) -> bool | None:
    """Whether the pattern's own outputs as the engine gave them (`seen`, the observed copy's outputs),
    carried through the rest of the model in float64, fail as the cell failed: they fail the
    reference, and the cell's outputs are within tolerance of them; None where that cannot be
    evaluated. An error of the pattern below the tolerance can grow past it after (a MaxPool's 1.3e-5
    times 1000: issue 41, sweep 16 J8), one beyond it can be dropped after (a Where that takes none
    of its wrong elements: J9), and a cell can fail by far more than the pattern makes (its 0.56
    beside another fault's 44: sweep 17 K9). `decided`: the elements a step float32 rounding decides
    (prepare's STEP_DECIDES), where the cell may hold the other side: left out (sweep 19 M10)."""
    with np.load(seen) as data:
        given = {name: data[name] for name in tensors if name in data.files}
    cut = onnx.ModelProto()
    cut.CopyFrom(model)
    cutting = [bool(set(node.output) & set(tensors)) for node in cut.graph.node]
    kept = [node for node, cut_out in zip(cut.graph.node, cutting) if not cut_out]
    if len(given) != len(tensors) or any(name and name not in given for node, cut_out in zip(cut.graph.node, cutting)
                                         if cut_out for name in node.output):
        return None
    del cut.graph.node[:]
    cut.graph.node.extend(kept)
    try:
        carried = float64_values(cut, {**inputs, **given}, keep=False).values
        if any(name not in carried for name in reference):  # an op after it with no float64 evaluation (sweep 19 M19)
            return None
        carried = {name: carried[name] for name in reference}
        fails = compare_runs([carried], reference, atol, rtol, mask)[0] == "fail"
        return fails and compare_runs([cell], settle(carried, cell, decided or {}), atol, rtol, mask)[0] == "pass"
    except Exception:  # noqa: BLE001 - a node that needs what was cut: the observation alone decides
        return None


def computed_otherwise(cell: Path, copy: Path, atol: float, rtol: float) -> str | None:
    """The outputs the observed copy's engine gave otherwise than the cell's (beyond the cell's
    tolerance), or None. Exposing a tensor can change what the engine computes — onnxruntime's
    LayerNorm fusion needs its intermediates read nowhere else (issue 41, sweep 11 D2) — and then
    the failure needs the pattern as the engine fuses it: the observation evidences the fault."""
    said = []
    with np.load(cell) as mine, np.load(copy) as theirs:
        for name in mine.files:
            a, b = mine[name], theirs[name] if name in theirs.files else None
            if b is None or a.shape != b.shape or a.dtype.kind != "f" or b.dtype.kind != "f":
                continue
            a, b = a.astype(np.float64), b.astype(np.float64)
            if not np.allclose(b, a, atol=atol, rtol=rtol, equal_nan=True):
                with np.errstate(invalid="ignore"):
                    said.append(f"{name} (max |Δ| {np.nanmax(np.abs(a - b)):.2e} between the cell's and the copy's)")
    return ", ".join(said) or None
