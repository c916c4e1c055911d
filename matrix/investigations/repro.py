"""`trtmatrix repro CELL`: a failing cell as a folder another person runs without trtmatrix —
model.onnx (the smallest part of the model that still fails), inputs.npz, expected.npz (float64),
repro.py (the engine's public API and numpy only) and ISSUE.md (the upstream tracker's template
filled in), verified before it is written.

1. The cell runs as an ordinary cell (cached). A cell that passes, or did not get to run, is
   refused with the reason; so is an error that is trtmatrix's own rather than the engine's, and
   wrong numbers that are not the engine's (blame.py: the FP16 conversion, the user's expected
   file or the reference is at fault).
2. Wrong numbers (fail, xfail): explain's first divergent node, then reduce.py grows the subgraph
   around it, a layer of predecessors at a time, each candidate an ordinary cell of the case in
   the cell's environment and profile (an ONNX-file trial, as explain's observed copies), until
   one fails. Where none does (a fusion across the cut), the whole model. An engine error or
   crash keeps the whole model (explain needs outputs). A torch cell keeps its module (program.pt2).
3. repro.py runs in the cell's own environment (it must fail) and in the environment of every
   good version the run or the bisects of its row (either direction) know of (it must pass): the
   versions next to the failing one. Only then is the folder written where asked; otherwise it is kept as
   `repro-unconfirmed`, and the command says so.
"""

from __future__ import annotations

import copy
import glob
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from ..environments.definitions import EnvDef
from ..environments.scripts import ScriptRun, run_script
from ..environments.staging import stage_worker
from ..compare import compare_runs
from ..plan import Cell, Plan, plan_of_trials
from ..prepare import INPUTS, MODEL, REFERENCE, artifact_dir, case_meta, copy_facts, model_for_profile
from ..prepare.torch_module import export_program
from ..reference.float64_graph import float64_values
from ..run import MatrixRun
from ..statuses import STEP_CAUSE
from ..stops import alive
from ..store.locks import cache_lock, held_for
from ..worker.files import OUTPUTS, PROGRAM_META, save_arrays
from ..worker.module_outputs import flat_outputs
from .blame import Blame, whose_fault
from .explain import ExplainError, explain_cell
from .issue_text import node_count
from .reduce import Reducer, Subgraph, constant_tensors, smallest_failing
from .repro_issue import IssueFacts, nodes, render_issue_md, render_repro_script
from .trial_files import TrialFiles
from .trigger import trigger_texts

# Errors that are trtmatrix's own, not the engine's: nothing to report upstream.
OWN_ERRORS = ("prepare failed", "model variant failed", "compare failed", "nothing to judge against", "worker exited",
              "uv ", "not run: ")  # the last: another run holds the environment (executors/unit.py)
FILES = ("model.onnx", "inputs.npz", "expected.npz", "repro.py", "ISSUE.md")
UNCONFIRMED = "-unconfirmed"
FLOAT64_PASS = "the ONNX graph evaluated in float64, node by node (onnx.reference)"
# repro.py's verdict line: "WRONG: max_abs 3.4e-01; …", or "WRONG: 768 NaN where expected is finite, …"
RESULT_LINE = re.compile(r"^(WRONG|RIGHT): ([^;\n]+)", re.M)
MAX_ABS = re.compile(r"^max_abs (\S+)$")
CANNOT_RUN = re.compile(r"^CANNOT RUN: (.*)$", re.M)  # repro.py's exit status 2


class ReproError(ValueError):
    """Not a cell repro can make a folder for (it passes, did not run, or failed in trtmatrix)."""


class NotTheEngine(ReproError):
    """The cell fails, but the engine computed the model it ran right: the fault is elsewhere."""


# What repro.py must do where the cell failed (by its verdict: before a known issue made it xfail).
EXPECTED = {"fail": "wrong", "error": "error", "crash": "crash"}
MUST = {"wrong": "give wrong numbers (exit 1)", "error": "raise (exit 1)", "crash": "crash",
        "pass": "give the right numbers (exit 0)"}


@dataclass
class Verification:
    env: str
    version: str
    expect: str  # wrong, error or crash where the cell failed; pass on a good version
    run: ScriptRun

    @property
    def result(self) -> str | None:
        """repro.py's verdict (WRONG/RIGHT: max_abs …, or the NaN and Inf counted), or None (an
        exception, a crash)."""
        found = RESULT_LINE.findall(self.run.output)
        return f"{found[-1][0]}: {found[-1][1]}" if found else None

    @property
    def max_abs(self) -> str | None:
        """The error size repro.py printed; None where it gave none (NaN or Inf where expected is finite)."""
        found = RESULT_LINE.findall(self.run.output)
        size = MAX_ABS.match(found[-1][1]) if found else None
        return size.group(1) if size else None

    @property
    def ok(self) -> bool:
        code, result = self.run.returncode, self.result or ""
        return {"pass": code == 0 and result.startswith("RIGHT"), "wrong": code == 1 and result.startswith("WRONG"),
                "error": code == 1 and not result, "crash": code is not None and code < 0}[self.expect]

    @property
    def must(self) -> str:
        return MUST[self.expect]

    def outcome(self) -> str:
        code = self.run.returncode
        if code is None:
            return "did not run: " + (self.run.output.strip().splitlines() or ["no output"])[-1]
        if code < 0:
            return f"killed by signal {-code}"
        cannot = CANNOT_RUN.findall(self.run.output)
        if code == 2 and cannot:
            return f"exit status 2 (could not run: {cannot[-1]})"
        if code == 1 and not self.result:  # the engine raised: its own last words
            said = [line for line in self.run.output.strip().splitlines() if line.strip()]
            return "exit status 1 (raised: " + (said[-1].strip() if said else "no message") + ")"
        return f"exit status {code}" + (f" ({self.result})" if self.result else "")

    def to_json(self) -> dict:
        return {"env": self.env, "version": self.version, "expect": self.expect, "returncode": self.run.returncode,
                "result": self.result, "ok": self.ok}


@dataclass
class Repro:
    cell: str
    engine: str
    version: str
    status: str
    folder: Path
    confirmed: bool
    nodes_original: int | None
    nodes: int | None
    reduced: bool
    verified: list[Verification] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nodes_all: int | None = None  # nodes, also those inside subgraphs
    triggers: list[str] = field(default_factory=list)  # the failing op as it is set up (trigger.py), for the title

    def summary(self) -> str:
        size = ("" if self.nodes is None else
                f"{self.nodes} of {self.nodes_original} nodes" if self.reduced else f"the whole model ({nodes(self.nodes)})")
        checks = "; ".join(f"{v.version}: {v.outcome()}" for v in self.verified)
        state = "verified" if self.confirmed else "NOT reproduced as expected"
        return f"{self.engine} {self.version} {self.status}: {size or 'the module'}; repro.py {state} ({checks})"

    def to_json(self) -> dict:
        return {"cell": self.cell, "engine": self.engine, "version": self.version, "status": self.status,
                "folder": str(self.folder), "confirmed": self.confirmed, "nodes_original": self.nodes_original,
                "nodes": self.nodes, "nodes_all": self.nodes_all, "reduced": self.reduced,
                "trigger": self.triggers[0] if self.triggers else None,
                "notes": self.notes, "summary": self.summary(),
                "verified": [v.to_json() for v in self.verified]}


@dataclass
class Model:
    """What the folder holds and how it was found."""
    files: dict[str, Path | onnx.ModelProto | dict]  # name in the folder → a file to copy, a model, arrays
    nodes_original: int | None
    nodes: int | None
    reduced: bool
    ops: list[str]
    record: dict  # the judged record of what ran: the reduced trial's, or the cell's own
    notes: list[str]
    reference: str = FLOAT64_PASS  # where expected.npz comes from
    focus: str | None = None  # the op type explain found going wrong first
    focus_label: str | None = None  # that node, as explain names it
    depth: int | None = 0  # layers of predecessors the failure needs (trigger.py); None: not found


def unconfirmed_folder(folder: Path) -> Path:
    """Where a repro that does not reproduce is kept: repro/<cell> → repro-unconfirmed/<cell>;
    any other folder X → X-unconfirmed."""
    if folder.parent.name == "repro":
        return folder.parent.with_name("repro" + UNCONFIRMED) / folder.name
    return folder.with_name(folder.name + UNCONFIRMED)


def check_target(folder: Path) -> str | None:
    """Why `folder` cannot be (re)written: it holds something that is not a repro folder."""
    for place in (folder, unconfirmed_folder(folder)):
        if place.exists() and (not place.is_dir() or (any(place.iterdir())
                                                      and not any((place / f).exists() for f in (*FILES, "repro.json")))):
            return f"{place} exists and is not a repro folder: give another -o"
    return None


def make_repro(plan: Plan, cell_id: str, folder: Path, run_dir: Path | None,
               on_event: Callable[[dict], None] = lambda e: None) -> Repro:
    remove_dead_staging(folder)
    cell = plan.cell(cell_id)
    envdef = plan.envs[cell.env]
    trial = MatrixRun(plan_of_trials(plan, cell_id), on_event=on_event, command="repro")
    own = trial.judge().iloc[0].to_dict()
    _refuse_unless_reproducible(cell_id, own)
    reduced = plan.profile(cell.profile).precision in ("fp16", "bf16")
    if own["verdict"] == "fail" and (envdef.engine != "torch" or not reduced):  # a torch FP32 cell: its export in float32
        blame = whose_fault(plan, cell_id, own, trial.result_dirs[cell_id])
        if not blame.engine:
            raise NotTheEngine(f"{cell_id}: {blame.line}; no upstream report written")
    if own["verdict"] == "fail" and envdef.engine == "torch" and reduced and \
            (beyond := _beyond_fp16(plan, cell, own) or _module_values(plan, cell, own, trial.result_dirs[cell_id])):
        raise NotTheEngine(f"{cell_id}: {beyond}; no upstream report written")
    if envdef.engine == "torch":
        model = _torch_module(plan, cell, own)
    else:
        model = _onnx_model(plan, cell_id, own, on_event)
    facts = IssueFacts.gather(plan, cell, envdef, own, run_dir)
    staging = folder.with_name(f"{_staging_prefix(folder)}{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        _write_files(staging, model.files)
        (staging / "repro.py").write_text(render_repro_script(facts, staging, model.focus or model.ops, model.record))
        verified = _verify(plan, facts, staging, on_event)
        confirmed = all(v.ok for v in verified)
        written = onnx.load(str(staging / "model.onnx")) if (staging / "model.onnx").is_file() else None
        repro = Repro(cell_id, facts.product, facts.version, own["status"], folder if confirmed else
                      unconfirmed_folder(folder), confirmed, model.nodes_original, model.nodes, model.reduced,
                      verified, model.notes + facts.notes, _with_subgraphs(model.nodes, written),
                      trigger_texts(written, model.focus_label, model.focus, model.depth) if written else [])
        (staging / "ISSUE.md").write_text(render_issue_md(facts, repro, model.record, model.ops, staging,
                                                          model.reference, repro.triggers))
        for place in (folder, unconfirmed_folder(folder)):
            shutil.rmtree(place, ignore_errors=True)
        repro.folder.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(repro.folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return repro


def _staging_prefix(folder: Path) -> str:
    return f".{folder.name}.partial-"


def remove_dead_staging(folder: Path) -> None:
    """The staging folders `.<name>.partial-<pid>` that earlier repros of `folder` left when they
    were killed outright (kill -9, the OOM killer): their process is gone, and nothing in them is
    lost (the next repro makes them again). A live repro's staging folder is left to it."""
    for staged in folder.parent.glob(glob.escape(_staging_prefix(folder)) + "*"):
        pid = staged.name.removeprefix(_staging_prefix(folder))
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(staged, ignore_errors=True)


def _with_subgraphs(nodes: int | None, written: onnx.ModelProto | None) -> int | None:
    """The nodes counted with those inside subgraphs (an If's branches): a model called "5 nodes"
    may hold thousands. Not the FP16 copy's casts: they are not the model's own nodes."""
    if nodes is None or written is None:
        return nodes
    return nodes + node_count(written.graph) - len(written.graph.node)


def _beyond_fp16(plan: Plan, cell: Cell, own: dict) -> str | None:
    """Why a torch FP16 cell's ±inf or NaN is the module's own FP16 range, not PyTorch's fault: the
    FP16 forecast of its export saw values beyond 65504 (issue 41, sweep 18 L11: a "verified"
    PyTorch bug was written for a module whose values reach 8.97e4), or None."""
    if plan.profile(cell.profile).precision != "fp16" or not (own.get("nan_count") or own.get("inf_count")):
        return None
    forecast = case_meta(artifact_dir(plan.path("cache_dir"), cell.case, cell.artifact_key)).get("fp16_forecast") or {}
    risky = [f"{risk['node']} ({risk['op_type']}): {reason}" for risk in forecast.get("risky", [])
             for reason in risk.get("reasons", []) if "FP16 max" in reason]
    if not risky:
        return None
    return (f"the module's own values leave FP16's range ({risky[0]}), so every right FP16 evaluation of it gives "
            "±inf there, as PyTorch did; run it in FP32 or BF16, or scale its values")


def _module_values(plan: Plan, cell: Cell, own: dict, outputs_dir: Path) -> str | None:
    """Why a torch FP16 or BF16 cell's failure is its module's own values in that precision: the
    module with its weights, buffers and inputs rounded to it, computed in float64, gives what PyTorch
    gave (within the cell's tolerance), so every right evaluation in that precision fails alike (issue
    41, sweep 18 L11: a constant 1 + 2**-30 is 1.0 in FP16), or None."""
    import torch

    from ..worker.engines.torch_engine import DTYPES, load_module

    artifacts = artifact_dir(plan.path("cache_dir"), cell.case, cell.artifact_key)
    precision = plan.profile(cell.profile).precision
    module, meta = load_module(str(artifacts / INPUTS), precision, "cpu")
    with np.load(artifacts / INPUTS) as data:
        args = [torch.from_numpy(data[name]) for name in meta["inputs"]]
    args = [a.to(DTYPES[precision]).double() if a.is_floating_point() else a for a in args]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # what the module makes itself is float64 too
    try:
        with torch.no_grad():
            exact = flat_outputs(copy.deepcopy(module).double()(*args))
    except Exception:  # noqa: BLE001 - a module that cannot run in float64 this way: no finding
        return None
    finally:
        torch.set_default_dtype(default)
    held = {name: value.detach().cpu().numpy() for name, value in zip(meta["outputs"], exact)}
    with np.load(outputs_dir / OUTPUTS) as data:
        ran = dict(data)
    if compare_runs([ran], held, float(own["atol"]), float(own["rtol"]))[0] != "pass":
        return None
    return (f"the module's own {precision.upper()} values fail it: with its weights, buffers and inputs rounded to "
            f"{precision.upper()} and computed exactly, it gives what PyTorch gave (within the cell's tolerance), so "
            f"every right {precision.upper()} evaluation fails alike; run it in FP32, or loosen the tolerance")


def _refuse_unless_reproducible(cell_id: str, own: dict) -> None:
    status, verdict, error = own["status"], own["verdict"], own.get("error")
    if status in ("pass", "xpass"):
        raise ReproError(f"{cell_id} passes (max_abs {own['max_abs']:.2e} within atol {own['atol']:g} + rtol "
                         f"{own['rtol']:g}·|reference|): there is nothing wrong to reproduce")
    if verdict not in EXPECTED:
        raise ReproError(f"{cell_id} is {status}, not a failing cell: repro makes folders for wrong numbers (fail, "
                         f"xfail), engine errors and crashes" + (f" ({error})" if error else ""))
    if str(error or "").startswith(STEP_CAUSE):
        raise ReproError(f"{cell_id} fails against its expected file at a step float32 rounding decides, no engine's "
                         f"fault or tolerance's: {error}")
    if verdict == "error" and str(error or "").startswith(OWN_ERRORS):
        raise ReproError(f"{cell_id}'s error is trtmatrix's own, not the engine's: {error}")


def _onnx_model(plan: Plan, cell_id: str, own: dict, on_event) -> Model:
    cell = plan.cell(cell_id)
    cache = plan.path("cache_dir")
    artifacts = artifact_dir(cache, cell.case, cell.artifact_key)
    profile, envdef = plan.profile(cell.profile), plan.envs[cell.env]
    original = onnx.load(str(artifacts / MODEL))
    count = len(original.graph.node)
    inside = node_count(original.graph)
    subgraphs = [f"the model's {nodes(count)} {'holds' if count == 1 else 'hold'} {inside} with their subgraphs "
                 "(an If's or a Loop's branches)"] \
        if inside != count else []
    ran = model_for_profile(artifacts, profile, envdef.runs_fp16_copy(profile))
    # The FP16 copy's own float64 evaluation is what the engine is held to: the original's would
    # count the conversion's error against the engine (blame.py cleared it of that share already).
    copy64 = copy_facts(ran)[0]
    expected = copy64 if ran.name != MODEL and copy64.is_file() else artifacts / REFERENCE
    whole = {"model.onnx": ran, "inputs.npz": artifacts / INPUTS, "expected.npz": expected}
    ops = op_counts(original)

    def whole_model(why: str, first: dict | None = None, depth: int | None = 0) -> Model:
        said = ("the FP16 copy attached as model.onnx, evaluated in float64 node by node (onnx.reference): the "
                "engine's own error, apart from the conversion's" if expected != artifacts / REFERENCE
                else case_meta(artifacts).get("reference", FLOAT64_PASS))
        return Model(whole, count, count, False, ops, own, [f"the whole model: {why}", *subgraphs],
                     said, first and first["op_type"], first and first["node"], depth)

    if own["verdict"] != "fail":
        return whole_model(f"the cell is {own['status']} (explain reduces wrong numbers, not an engine's error or crash)")
    try:
        first = explain_cell(plan, cell_id, on_event).first_divergent
    except ExplainError as exc:
        return whole_model(f"explain could not observe it ({exc})")
    if first is None:
        return whole_model("explain found no node that leaves tolerance while its inputs are within it")
    node = original.graph.node[first["order"]]
    # a constant the FP16 conversion changed (its overflow); one the model computes from its weights is the
    # engine's to compute, at load or at run time (issue 41, sweep 16 J13: a Cast chain on a weight)
    if ran.name != MODEL and all(name in constant_tensors(original) for name in node.output if name):
        return whole_model(f"explain's first divergent node {first['node']} is a constant: its value changed before the "
                           "engine computed anything (an FP16 copy's overflow, say), so no subgraph of it isolates an "
                           "engine fault", first)
    with np.load(artifacts / INPUTS) as data:
        reducer = Reducer(original, float64_values(original, dict(data)).values)
    found = _smallest_failing_subgraph(plan, cell_id, reducer, reducer.cuts(first["order"]), on_event)
    start = f"explain's first divergent node {first['node']} ({first['op_type']})"

    if found is None:
        return whole_model(f"no subgraph from {start} back to the model's inputs fails on its own (the failure "
                           "needs what comes after it, such as a fusion across the cut)", first, None)
    subgraph, record, ran, blame = found
    if not blame.engine:  # the whole outputs may hide it: a Softmax after it multiplies its rounding
        raise NotTheEngine(f"{cell_id}: at {start}, in the smallest subgraph that fails on its own ({subgraph.nodes} "
                           f"node{'s' * (subgraph.nodes != 1)}), {blame.line}; no upstream report written")
    if subgraph.nodes >= count:
        why = ("the model is that one node" if count == 1 else f"the smallest failing subgraph around {start} is all "
               f"of it: {first['op_type']} alone gives the right numbers, so what feeds it takes part (a fusion)")
        return whole_model(why, first, subgraph.depth)
    notes = [f"reduced from {count} to {subgraph.nodes} nodes: {start}, with {subgraph.depth} layer"
             f"{'s' * (subgraph.depth != 1)} of predecessors, fails on its own (inputs from the float64 pass)", *subgraphs]
    if envdef.runs_fp16_copy(profile):
        notes.append(f"model.onnx is the FP16 copy the engine ran ({len(ran.graph.node)} nodes with its casts)")
    return Model({"model.onnx": ran, "inputs.npz": subgraph.inputs, "expected.npz": subgraph.expected},
                 count, subgraph.nodes, True, op_counts(subgraph.model), record, notes, focus=first["op_type"],
                 focus_label=first["node"], depth=subgraph.depth)


def op_counts(model: onnx.ModelProto) -> list[str]:
    """The model's op types in order of appearance, with how many of each: 'Constant ×2', 'Pad'."""
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return [op + (f" ×{n}" if n > 1 else "") for op, n in counts.items()]


def _smallest_failing_subgraph(plan: Plan, cell_id: str, reducer: Reducer, cuts, on_event
                               ) -> tuple[Subgraph, dict, onnx.ModelProto, Blame] | None:
    """Each batch of depths runs as ONNX-file trials of the cell, in one environment job; the
    smallest failing one comes back with the model the engine ran (its FP16 copy where it runs one)
    and whose fault its failure is, and the trials' files are removed from the cache."""
    cell = plan.cell(cell_id)
    cache = plan.path("cache_dir")
    work = cache / "investigations" / "repro" / f"{cell.artifact_key[:16]}-{cell.profile}-{cell.env}"
    trials_files = TrialFiles(cache, work, "repro")
    judged: dict[int, tuple[Subgraph, dict, Cell, Plan]] = {}

    def fails(indices: list[int]) -> list[bool]:
        models, made = {}, {}
        for index in indices:
            subgraph = made[index] = reducer.subgraph(cuts[index])
            target = work / f"depth{subgraph.depth}"
            target.mkdir(parents=True, exist_ok=True)
            onnx.save(subgraph.model, str(target / MODEL))
            save_arrays(target / INPUTS, subgraph.inputs)
            save_arrays(target / "expected.npz", subgraph.expected)
            models[f"{cell.case}.repro-depth{subgraph.depth}"] = {"onnx": target / MODEL, "inputs": target / INPUTS,
                                                                  "expected": target / "expected.npz"}
        trials = plan_of_trials(plan, cell_id, models=models)
        frame = trials_files.judge(trials, on_event)
        for index, trial, (_, record) in zip(indices, trials.cells, frame.iterrows()):
            judged[index] = (made[index], record.to_dict(), trial, trials)
        return [judged[index][1]["verdict"] == "fail" for index in indices]

    profile, envdef = plan.profile(cell.profile), plan.envs[cell.env]
    with held_for(cache, f"repro-{cell.artifact_key[:16]}-{cell.env}", f"reducing {cell.cell_id}",
                  lambda who: on_event({"event": "waiting", "for": who}), command="repro"):
        try:
            index = smallest_failing(len(cuts), fails)
            if index is None:
                return None
            subgraph, record, trial, trials = judged[index]
            blame = whose_fault(trials, trial.cell_id, record, trials_files.result_dirs[trial.cell_id])
            ran = model_for_profile(artifact_dir(cache, trial.case, trial.artifact_key), profile,
                                    envdef.runs_fp16_copy(profile))
            return subgraph, record, onnx.load(str(ran)), blame
        finally:
            trials_files.remove()


def _torch_module(plan: Plan, cell: Cell, own: dict) -> Model:
    artifacts = artifact_dir(plan.path("cache_dir"), cell.case, cell.artifact_key)
    if not (artifacts / PROGRAM_META).is_file():
        raise ReproError(f"{cell.case} has no PyTorch module (an ONNX-file or suite case): nothing for torch to run")
    precision = plan.profile(cell.profile).precision
    try:
        program = export_program(artifacts, {"tf32": "fp32"}.get(precision, precision))
    except ValueError as exc:
        raise ReproError(f"{cell.case}: {exc}") from None
    return Model({"program.pt2": program, "inputs.npz": artifacts / INPUTS,
                  "expected.npz": artifacts / REFERENCE}, None, None, False, [], own,
                 ["the case's PyTorch module as torch.export saved it (program.pt2): a torch cell runs the module, "
                  "not an ONNX model, so nothing is reduced"], case_meta(artifacts).get("reference", "float64"))


def _write_files(folder: Path, files: dict) -> None:
    for name, content in files.items():
        if isinstance(content, Path):
            shutil.copyfile(content, folder / name)
        elif isinstance(content, onnx.ModelProto):
            onnx.save(content, str(folder / name))
        else:
            save_arrays(folder / name, content)


def _verify(plan: Plan, facts: IssueFacts, folder: Path, on_event) -> list[Verification]:
    """repro.py where the cell ran (it must fail), then in each good version's environment."""
    cache = plan.path("cache_dir")
    with cache_lock(cache, "worker"):
        worker_home = stage_worker(cache)
    checks: list[tuple[EnvDef, str, str]] = [(facts.envdef, facts.version, EXPECTED[facts.own["verdict"]])]
    checks += [(envdef, version, "pass") for version, envdef in facts.good_envs.items()]
    done = []
    for envdef, version, expect in checks:
        on_event({"event": "repro", "env": envdef.name, "version": version, "expect": expect})
        done.append(Verification(envdef.name, version, expect,
                                 run_script(envdef, cache, worker_home, folder, "repro.py",
                                            plan.config.timeout_s(facts.cell.case))))
    return done
