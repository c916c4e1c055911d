"""`trtmatrix explain CELL`: the first node of a cell's model whose outputs leave tolerance while
all its inputs are still within it.

1. Every intermediate floating-point tensor is computed in float64 on the host (float64_graph),
   for exported and ONNX-file models alike.
2. The same tensors are observed in the cell's own environment and profile: a copy of the model
   with them as its graph outputs runs as an ordinary cell (an ONNX-file case whose expected
   outputs are the float64 values), so engine, FP16 copy, isolation and judgement are the
   matrix's own. TensorRT gets the same copy: its ONNX parser makes every graph output a network
   output, as Polygraphy's `--trt-outputs mark all` does (not yet run on real TensorRT).
3. Observing a tensor changes what is computed: engines do not fuse across a graph output
   (onnxruntime's fusions, TensorRT's layer fusion). Where observing every tensor at once makes
   the cell's failure disappear, each node is observed alone instead (one cell per node, all in
   one environment job): a fused pair then fails at its last node, whose input still looked right.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pandas as pd

from ..plan import Plan, plan_of_trials
from ..prepare import INPUTS, MODEL, REFERENCE, artifact_dir, case_meta
from ..prepare.layers import resolve_nodes
from ..run import MatrixRun
from ..store.locks import held_for
from ..worker.files import save_arrays
from ..statuses import EXPECTED_CAUSE, STEP_CAUSE
from ..reference.agreement import subgraph_nodes
from ..reference.float64_graph import FLOAT_TYPES, float64_values, node_label
from ..prepare.fp16_forecast import stand_in_only
from .trial_files import TrialFiles

ALL_AT_ONCE, ONE_AT_A_TIME = "every tensor at once", "one node at a time"
# One rounding (half a unit in the last place) of a value of magnitude 1, per profile precision.
ROUNDING = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "tf32": 2.0 ** -11, "fp32": 2.0 ** -24}
# A node whose error exceeds what its inputs handed it by more than this is where the error starts;
# where no node does, the error is rounding spread over the model (it grows node after node).
JUMP_FACTOR = 30.0
# Observing one node at a time is one cell per node: beyond this, say so rather than run for hours.
MAX_SINGLE_OBSERVATIONS = 400
RAN = {"pass", "fail"}


class ExplainError(ValueError):
    """Not a cell explain can work on (it did not run, or its model cannot be observed)."""


@dataclass
class Explanation:
    cell: str
    verdict: str
    max_abs: float | None
    atol: float
    rtol: float
    observed: str
    nodes: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def divergent(self) -> pd.DataFrame:
        """Nodes out of tolerance, but for a stand-in for ±inf (float32's largest, in attention
        masks) that FP16 holds as ±65504 or ±inf: an error in number, not in what it does."""
        return self.nodes[(self.nodes["within"] == False) & ~self.nodes["stand_in"]]  # noqa: E712

    @property
    def first_divergent(self) -> dict | None:
        hits = self.divergent[self.divergent["inputs_within"] == True]  # noqa: E712
        if hits.empty:
            return None
        row = hits.iloc[0]
        return {"node": row["node"], "op_type": row["op_type"], "order": int(row["order"]),
                "max_abs": _number(row["max_abs"]), "jump": _number(row["jump"]), "outputs": row["outputs"]}

    @property
    def spread(self) -> dict | None:
        """Where the cell fails and no node out of tolerance jumps by more than JUMP_FACTOR over what
        its inputs handed it: the error is rounding spread over the model, not one divergent node.
        {"largest_jump" (of the nodes out of tolerance), "at", "factor"}; None otherwise."""
        out = self.divergent[self.divergent["jump"].notna()]
        if self.verdict != "fail" or out.empty or (out["jump"] > JUMP_FACTOR).any():
            return None
        top = out.loc[out["jump"].idxmax()]
        return {"largest_jump": float(top["jump"]), "at": top["node"], "factor": JUMP_FACTOR}

    def to_json(self) -> dict:
        measured = self.nodes[self.nodes["max_abs"].notna()]
        return {"cell": self.cell, "verdict": self.verdict, "max_abs": self.max_abs, "atol": self.atol,
                "rtol": self.rtol, "observed": self.observed, "first_divergent": self.first_divergent,
                "spread": self.spread, "nodes": len(self.nodes), "notes": self.notes,
                "errors": [[int(o), _number(v)] for o, v in zip(measured["order"], measured["max_abs"])]}


def _magnitude(values: np.ndarray) -> float:
    finite = np.abs(values[np.isfinite(values)]) if values.size else values
    return float(finite.max()) if finite.size else 0.0


def _number(value) -> float | str | None:
    """JSON has no infinity: a NaN/Inf output's error is the string "inf"."""
    if value is None or pd.isna(value):
        return None
    return "inf" if np.isinf(value) else float(value)


SUBGRAPHS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def observable_tensors(model: onnx.ModelProto) -> tuple[dict[str, onnx.ValueInfoProto], set[str]]:
    """Every floating-point tensor a node produces, with its type from shape inference; and the
    tensors whose type cannot be inferred, which cannot be declared as outputs (not observable)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    produced = [name for node in model.graph.node for name in node.output if name]
    return ({name: typed[name] for name in produced
             if name in typed and typed[name].type.tensor_type.elem_type in FLOAT_TYPES},
            {name for name in produced if name not in typed})


def with_outputs(model: onnx.ModelProto, outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    del copy.graph.output[:]
    copy.graph.output.extend(outputs)
    return copy


class Observer:
    """Writes observed copies of one model and runs them as trials of the cell."""

    def __init__(self, plan: Plan, cell_id: str, model: onnx.ModelProto, inputs: Path,
                 reference: dict[str, np.ndarray], folder: Path, on_event: Callable[[dict], None]):
        self.plan, self.cell_id, self.model, self.inputs = plan, cell_id, model, inputs
        self.reference, self.folder, self.on_event = reference, folder, on_event
        self.files = TrialFiles(plan.path("cache_dir"), folder, "explain")  # removed once observed

    def copy(self, name: str, outputs: list[onnx.ValueInfoProto]) -> dict[str, Path]:
        target = self.folder / name
        target.mkdir(parents=True, exist_ok=True)
        files = {"onnx": target / "model.onnx", "inputs": self.inputs, "expected": target / "expected.npz"}
        onnx.save(with_outputs(self.model, [self._ranked(v) for v in outputs]), str(files["onnx"]))
        save_arrays(files["expected"], {v.name: self.reference[v.name] for v in outputs})
        return files

    def _ranked(self, value: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
        """An output whose rank shape inference could not tell, declared with its float64 value's rank
        (dimensions unnamed): the checker, which the FP16 copy must pass, wants a shape on an output."""
        if value.type.tensor_type.HasField("shape"):
            return value
        rank = np.ndim(self.reference[value.name])
        return onnx.helper.make_tensor_value_info(value.name, value.type.tensor_type.elem_type, [None] * rank)

    def run(self, copies: dict[str, list[onnx.ValueInfoProto]]) -> dict[str, dict]:
        """{tensor: its metrics (compare.OutputMetrics as a dict)} over every copy run."""
        case = self.plan.cell(self.cell_id).case
        models = {f"{case}.{name}": self.copy(name, outputs) for name, outputs in copies.items()}
        frame = self.files.judge(plan_of_trials(self.plan, self.cell_id, models=models), self.on_event)
        broken = frame[~frame["verdict"].isin(RAN)]
        if not broken.empty:
            row = broken.iloc[0]
            raise ExplainError(f"the observed copy of the model did not run ({row['verdict']}): {row['error']}")
        return {o["name"]: o for outputs in frame["outputs"] for o in json.loads(outputs)}


def _jump(error: float, input_errors: list[float], rounding: float) -> float:
    """How many times a node's error exceeds what it was handed: the worst error of its inputs, or
    (inputs exact: graph inputs, weights) one rounding of its own output."""
    if not np.isfinite(error):
        return np.inf
    handed = max([e for e in input_errors if np.isfinite(e)] + [rounding])
    return error / handed if handed > 0 else (np.inf if error > 0 else 1.0)


def node_table(model: onnx.ModelProto, metrics: dict[str, dict], missing: dict[str, str],
               fp32_nodes: set[str] | None, risks: dict[str, str], roundings: dict[str, float],
               stand_ins: set[str] = frozenset()) -> pd.DataFrame:
    """One row per node in topological order: its outputs' worst error against float64, whether
    they stayed within tolerance and whether all its observed inputs did, and how many times its
    error exceeds what its inputs handed it (`jump`; `roundings`: one rounding of each tensor in
    the profile's precision); for an FP16 profile (fp32_nodes given), whether keep_fp32 held the
    node in FP32; and the FP16 risk the forecast saw in it before any build (prepare/fp16_forecast.py)."""
    within_by_tensor = {name: m["mismatch_frac"] == 0 for name, m in metrics.items()}
    rows = []
    for order, node in enumerate(model.graph.node):
        label = node_label(node, order)
        measured = [metrics[name] for name in node.output if name in metrics]
        inputs = [within_by_tensor[name] for name in node.input if name in within_by_tensor]
        stand_in = bool(stand_ins & set(node.output))
        note = missing.get(label) or ("" if measured else "no floating-point output") or \
            ("a stand-in for ±inf (float32's largest): FP16 holds it as ±65504 or ±inf" if stand_in else "")
        error = max((m["max_abs"] for m in measured), default=np.nan)
        rows.append({
            "order": order, "node": label, "op_type": node.op_type,
            "outputs": ", ".join(node.output),
            "max_abs": error,
            "jump": _jump(error, [metrics[n]["max_abs"] for n in node.input if n in metrics],
                          max((roundings.get(n, 0.0) for n in node.output), default=0.0)) if measured else np.nan,
            "max_rel": max((m["max_rel"] for m in measured), default=np.nan),
            "nan_count": sum(m["nan_count"] for m in measured) if measured else pd.NA,
            "inf_count": sum(m["inf_count"] for m in measured) if measured else pd.NA,
            "mismatch_frac": max((m["mismatch_frac"] for m in measured), default=np.nan),
            "within": all(m["mismatch_frac"] == 0 for m in measured) if measured else pd.NA,
            "inputs_within": all(inputs),
            "fp32": pd.NA if fp32_nodes is None else node.name in fp32_nodes,
            "fp16_risk": risks.get(label, ""),
            "stand_in": stand_in,
            "note": note,
        })
    return pd.DataFrame(rows).astype({"nan_count": "Int64", "inf_count": "Int64", "within": "boolean", "fp32": "boolean"})


def explain_cell(plan: Plan, cell_id: str, on_event: Callable[[dict], None] = lambda e: None) -> Explanation:
    cell = plan.cell(cell_id)
    if plan.envs[cell.env].engine == "torch":  # issue 41, sweep 18 L6: it said the case had no module
        raise ExplainError(f"{cell_id} is a torch cell: explain observes the ONNX export's tensors, and the torch "
                           "engine runs the case's PyTorch module itself, whose layers are no ONNX nodes; explain an "
                           "onnxruntime or TensorRT cell of the same row")
    own = MatrixRun(plan_of_trials(plan, cell_id), on_event=on_event, command="explain").judge().iloc[0]
    if own["verdict"] == "disputed":  # the engine is not where to look: the evaluations' parting is
        raise ExplainError(f"{cell_id} was not judged, its reference is disputed; start there, not at the engine: "
                           f"{str(own['error']).removeprefix('reference disputed: ')}")
    if own["verdict"] not in RAN:
        raise ExplainError(f"{cell_id} is {own['verdict']}, not a cell with outputs to explain: {own['error']}")
    if str(own["error"]).startswith(EXPECTED_CAUSE):  # the engine computed the model right
        raise ExplainError(f"{cell_id} fails against its expected file alone; start there, not at the engine: "
                           f"{str(own['error']).removeprefix(EXPECTED_CAUSE)}")
    if str(own["error"]).startswith(STEP_CAUSE):  # no engine computes it otherwise than float32 does
        raise ExplainError(f"{cell_id} fails against its expected file at a step float32 rounding decides; start "
                           f"there, not at the engine: {own['error']}")
    cache = plan.path("cache_dir")
    artifacts = artifact_dir(cache, cell.case, cell.artifact_key)
    model = onnx.load(str(artifacts / MODEL))
    with np.load(artifacts / INPUTS) as data:
        inputs = dict(data)
    reference = float64_values(model, inputs)
    stood_in = _graph_outputs_from_reference(model, reference, artifacts)
    observable, untyped = observable_tensors(model)
    tensors = [v for name, v in observable.items() if name in reference.values]
    for order, node in enumerate(model.graph.node):
        if untyped & set(node.output):
            reference.missing.setdefault(node_label(node, order), "not observable: shape inference gives no type "
                                                                   "for its output")
    if not tensors:
        raise ExplainError(f"no intermediate tensor of {cell.case}'s model has a float64 value to compare with")
    profile = plan.profile(cell.profile)
    fp32_nodes = set(resolve_nodes(model, profile.keep_fp32)) if profile.precision == "fp16" else None
    notes = [f"{label}: {reason}" for label, reason in reference.missing.items()] + stood_in + _unopened(model)
    with held_for(cache, f"explain-{cell.artifact_key[:16]}", f"explaining {cell_id}",
                  lambda who: on_event({"event": "waiting", "for": who}), command="explain"):
        observer = Observer(plan, cell_id, model, artifacts / INPUTS, reference.values,
                            cache / "investigations" / "explain" / cell.artifact_key[:16], on_event)
        try:
            metrics, observed = observer.run({"all": tensors}), ALL_AT_ONCE
            if own["verdict"] == "fail" and all(m["mismatch_frac"] == 0 for m in metrics.values()):
                notes.append("with every tensor observed at once the cell passes: the failure needs a fusion "
                             "across tensors that observing breaks, so each node was observed alone")
                metrics, observed = _one_at_a_time(observer, model, tensors), ONE_AT_A_TIME
        finally:  # the finding keeps the numbers; the observed copies are not kept
            observer.files.remove()
    forecast = case_meta(artifacts).get("fp16_forecast") or {"risky": []}
    # FP16's range and subnormals: said on an FP16 cell only, not on the FP32 cell the forecast means nothing to
    risks = {r["node"]: "; ".join(r["reasons"]) for r in forecast["risky"]} if profile.precision == "fp16" else {}
    unit = ROUNDING[profile.precision]
    roundings = {v.name: unit * _magnitude(reference.values[v.name]) for v in tensors}
    stand_ins = {v.name for v in tensors if stand_in_only(np.abs(reference.values[v.name][np.isfinite(reference.values[v.name])]))}
    nodes = node_table(model, metrics, reference.missing, fp32_nodes, risks, roundings, stand_ins)
    max_abs = None if pd.isna(own["max_abs"]) else float(own["max_abs"])
    return Explanation(cell_id, own["verdict"], max_abs, float(own["atol"]), float(own["rtol"]), observed, nodes, notes)


def _unopened(model: onnx.ModelProto) -> list[str]:
    """A note per node holding subgraphs (If, Loop, Scan): only the main graph's tensors are observed,
    so a node inside a branch or body is never the one named; the node holding it is as deep as it goes."""
    return [f"{node_label(node, order)} ({node.op_type}): explain does not look inside its "
            f"{' and '.join(a.name for a in node.attribute if a.type in SUBGRAPHS)} ({count} nodes): their error "
            "shows at this node's outputs" for order, node in enumerate(model.graph.node) if (count := subgraph_nodes(node))]


def _graph_outputs_from_reference(model: onnx.ModelProto, reference, artifacts: Path) -> list[str]:
    """Where a node has no float64 evaluation, the graph's outputs still have the case's reference
    (the user's expected file, or what prepare took instead): those are compared with it, so a
    model of such nodes (on a one-node model, the graph's outputs are that node's) is explained
    rather than refused. Returns the notes saying so."""
    absent = [o.name for o in model.graph.output if o.name not in reference.values]
    if not absent:
        return []
    with np.load(artifacts / REFERENCE) as data:
        given = {name: data[name] for name in absent if name in data.files}
    reference.values.update(given)
    how = case_meta(artifacts).get("reference", "the case's reference")
    return [f"{name}: no float64 evaluation; the graph's output, compared with the case's reference instead ({how})"
            for name in given]


def _one_at_a_time(observer: Observer, model: onnx.ModelProto, tensors: list[onnx.ValueInfoProto]) -> dict[str, dict]:
    by_name = {v.name: v for v in tensors}
    copies = {}
    for order, node in enumerate(model.graph.node):
        outputs = [by_name[name] for name in node.output if name in by_name]
        if outputs:
            copies[f"node{order}"] = outputs
    if len(copies) > MAX_SINGLE_OBSERVATIONS:
        raise ExplainError(f"observing every tensor hides the failure, and observing {len(copies)} nodes one at a "
                           f"time is more than {MAX_SINGLE_OBSERVATIONS} cells")
    return observer.run(copies)
