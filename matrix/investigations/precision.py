"""`trtmatrix precision CELL`: the fewest nodes to keep in FP32 for a failing FP16 cell to pass,
as a profile ready to paste into the matrix file.

A control first: the model in FP32 end to end (the cell's profile with precision fp32: no FP16
copy, no casts). If it fails too, the problem is not FP16 precision and the search stops there.
Then every node held in FP32 inside the FP16 build (keep_fp32 = every op type): where that still
fails, the FP16 rounding of the tensors between nodes is the cause (onnxruntime's FP16 copy keeps
them FP16 around a kept node), which no keep_fp32 set fixes, and the search says so. Otherwise
delta debugging (Zeller's ddmin, the search Polygraphy's `debug precision` makes over layers):
over op types first, then over the names of the nodes of the op types it kept. Each trial is a profile of the
cell's case with keep_fp32 set (the cell's own keep_fp32 included), run as an ordinary cell
(isolated, cached, judged with the cell's tolerance); the trials of one round run together, in
one environment job.

TensorRT: keep_fp32 selects network layers by the op type or name of the ONNX node they came from
(worker/layer_select.py), so the same search names ONNX nodes there too; not yet run on TensorRT.
"""

from __future__ import annotations

import glob
import math
from dataclasses import dataclass, field
from typing import Callable

import onnx

from ..config import Profile
from ..plan import Plan, plan_of_trials
from ..prepare import MODEL, artifact_dir
from ..reference.agreement import subgraph_nodes
from ..run import MatrixRun

GOOD = {"pass"}


class PrecisionError(ValueError):
    """Not a cell precision can work on (not FP16, not failing, did not run)."""


@dataclass
class PrecisionSearch:
    """Runs keep_fp32 trials of one cell, a round at a time, and counts them."""

    plan: Plan
    cell_id: str
    on_event: Callable[[dict], None]
    trials: int = 0
    log: list[dict] = field(default_factory=list)

    def judge(self, profiles: dict[str, Profile]) -> dict[str, dict]:
        """{profile name: {"verdict", "max_abs", "error"}} of trials of the cell, run together."""
        self.trials += len(profiles)
        frame = MatrixRun(plan_of_trials(self.plan, self.cell_id, profiles=profiles), on_event=self.on_event,
                          command="precision").judge()
        return {row["profile"]: {"verdict": row["verdict"], "max_abs": _number(row["max_abs"]),
                                 "error": row["error"] if isinstance(row["error"], str) else None}
                for _, row in frame.iterrows()}

    def passes(self, candidates: list[list[str]]) -> list[bool]:
        profile = self.plan.profile(self.plan.cell(self.cell_id).profile)
        profiles = {f"trial{self.trials + i + 1}": Profile(**{**profile.model_dump(),
                                                               "keep_fp32": (*profile.keep_fp32, *names)})
                    for i, names in enumerate(candidates)}
        judged = self.judge(profiles)
        self.log += [{"keep_fp32": names, **judged[name]} for name, names in zip(profiles, candidates)]
        return [judged[name]["verdict"] in GOOD for name in profiles]


def _number(value) -> float | None:
    return None if value is None or value != value else float(value)


def ddmin(items: list[str], passes: Callable[[list[list[str]]], list[bool]]) -> list[str]:
    """A smallest-it-can-find subset of `items` that still passes, given that all of them do.
    Each round judges every chunk and every complement together."""
    n = 2
    while len(items) >= 2:
        size = math.ceil(len(items) / n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        complements = [[x for x in items if x not in chunk] for chunk in chunks] if len(chunks) > 2 else []
        results = passes(chunks + complements)
        hit = next((i for i, ok in enumerate(results) if ok), None)
        if hit is not None:
            items, n = (chunks[hit], 2) if hit < len(chunks) else (complements[hit - len(chunks)], max(n - 1, 2))
        elif n >= len(items):
            break
        else:
            n = min(2 * n, len(items))
    return items


def find_fp32_nodes(plan: Plan, cell_id: str, on_event: Callable[[dict], None] = lambda e: None) -> dict:
    cell = plan.cell(cell_id)
    profile = plan.profile(cell.profile)
    if profile.precision != "fp16":
        raise PrecisionError(f"{cell_id} is an FP32 cell: precision looks for layers to keep in FP32 in FP16 builds")
    if plan.envs[cell.env].engine == "torch":  # issue 41, sweep 18 L10: a TypeError after three trials
        raise PrecisionError(f"{cell_id} is a torch cell: precision searches the ONNX nodes to keep in FP32 "
                             "(keep_fp32), which the torch engine has no use for: it runs the case's PyTorch module "
                             "itself; search an onnxruntime or TensorRT cell of the same row")
    own = MatrixRun(plan_of_trials(plan, cell_id), on_event=on_event, command="precision").judge().iloc[0]
    if own["verdict"] != "fail":
        raise PrecisionError(f"{cell_id} is {own['verdict']}: precision searches only a failing cell"
                             + (f" ({own['error']})" if own["error"] else ""))
    model = onnx.load(str(artifact_dir(plan.path("cache_dir"), cell.case, cell.artifact_key) / MODEL),
                      load_external_data=False)
    op_types = sorted({node.op_type for node in model.graph.node})
    search = PrecisionSearch(plan, cell_id, on_event)
    finding = {"cell": cell_id, "verdict": own["verdict"], "max_abs": float(own["max_abs"]),
               "profile_name": f"{cell.profile}-fp32-fix", "profile": None}
    control = search.judge({"fp32-control": profile.model_copy(update={"precision": "fp32", "keep_fp32": ()})})
    finding["control"] = {"what": "the model in FP32 end to end (no FP16 copy, no casts)", **control["fp32-control"]}
    said = f"Control, the model in FP32 end to end: {_verdict_text(finding['control'])}. "
    if finding["control"]["verdict"] not in GOOD:
        return {**finding, "trials": search.trials, "tried": search.log,
                "summary": said + "The cell fails in FP32 too: the problem is not FP16 precision."}
    if not search.passes([op_types])[0]:
        everything = search.log[0]
        if everything["verdict"] not in ("pass", "fail"):  # sweep 18 L10: a TypeError on its missing max_abs
            return {**finding, "all_kept": everything, "trials": search.trials, "tried": search.log,
                    "summary": said + f"With every node held in FP32 inside the FP16 build the trial is "
                               f"{everything['verdict']} ({everything.get('error') or 'no reason given'}): no "
                               "keep_fp32 set can be searched here."}
        return {**finding, "all_kept": everything, "trials": search.trials, "tried": search.log,
                "summary": said + f"FP16 precision is the cause, but with every node held in FP32 inside the FP16 "
                           f"build the cell still fails (max_abs {everything['max_abs']:.2g}): the tensors between the nodes "
                           "stay FP16 in this engine's FP16 build, so no keep_fp32 set fixes it. Run the model in FP32, "
                           "or judge it with a wider tolerance or an acceptance rule."}
    kept_types = ddmin(op_types, search.passes)
    nodes = [node for node in model.graph.node if node.op_type in kept_types]
    # By name, where every node of those types has one (a name is a glob: escaped, it means itself).
    kept = ddmin([glob.escape(node.name) for node in nodes], search.passes) if all(n.name for n in nodes) else kept_types
    return {**finding, "trials": search.trials, "tried": search.log, "op_types": kept_types, "keep_fp32": kept,
            "profile": {**profile.model_dump(include={"precision", "optimization"}),
                        "keep_fp32": [*profile.keep_fp32, *kept]},
            "summary": said + f"{len(kept)} of {len(model.graph.node)} nodes kept in FP32 make the cell pass "
                              f"(op types {', '.join(kept_types)}; {search.trials} trials)" + _whole(nodes, kept)}


def _whole(nodes: list[onnx.NodeProto], kept: list[str]) -> str:
    """Said of each kept node that holds subgraphs (If, Loop, Scan): keep_fp32 names nodes of the
    main graph, so such a node is kept with every node inside it, and the search cannot go further in."""
    whole = [f"{node.name or node.op_type} ({node.op_type}, {count} nodes inside)" for node in nodes
             if (count := subgraph_nodes(node)) and (glob.escape(node.name) in kept or node.op_type in kept)]
    return (f". Kept whole, with every node of its subgraphs: {', '.join(whole)}; keep_fp32 names nodes of the main "
            "graph only, so which node inside needs FP32 is not searched") if whole else ""


def _verdict_text(trial: dict) -> str:
    return trial["verdict"] + (f" (max_abs {trial['max_abs']:.2g})" if trial.get("max_abs") is not None else "")
