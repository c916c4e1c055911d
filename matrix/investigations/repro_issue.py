"""What a repro's repro.py and ISSUE.md say, gathered from the cell, its run and the findings
kept there: the engine and its settings, the versions that fail and the good ones next to them
(the row's other columns of the same engine, every bisect of the row), the FP32 workaround
(`precision`), what the other engines of the row give, the known issue that covers it.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import pandas as pd

from ..config import Profile
from ..environments.definitions import EnvDef, available_envdefs
from ..environments.image_names import image_ref
from ..plan import Cell, Plan
from ..prepare import artifact_dir
from ..prepare.layers import resolve_nodes
from ..report.error_text import worst_error
from ..report.investigation_text import nodes
from ..sources.known_issues import KnownIssue
from ..store import read_run
from ..store.findings import read_findings
from ..worker.engines import REPEATS, WARMUP
from ..worker.files import PROGRAM_META
from .bisect import BisectError, envdef_for
from .release_history import OTHER_FAULT, ReleaseHistory, version_key
from .issue_text import expected_words, nonfinite, outputs_sentence, profile_settings, title
from .repro_render import md, render_issue, render_script

if TYPE_CHECKING:
    from .repro import Repro

RUNS = WARMUP + REPEATS  # inferences per session or engine in repro.py: as many as a cell runs
PRODUCTS = {"onnxruntime": "onnxruntime", "tensorrt": "TensorRT", "tensorrt-rtx": "TensorRT-RTX", "torch": "PyTorch"}
PACKAGES = {"onnxruntime": "onnxruntime", "tensorrt": "tensorrt", "tensorrt-rtx": "tensorrt-rtx-cu12", "torch": "torch"}
SDPA = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
PLATFORM = r"^platform: (\S+) \((\S+)\)$"
NUMPY2_ORT = "1.19.0"  # the first onnxruntime built against numpy 2
MEASURED = ("pass", "fail", "error", "crash")  # verdicts that say how a release does on the row


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


@dataclass
class IssueFacts:
    plan: Plan
    cell: Cell
    envdef: EnvDef
    profile: Profile
    own: dict  # the cell's judged record, as run now
    version: str  # the engine's version as the environment reports it
    run_id: str | None
    row: list[dict]  # the row's cells in the run: env, engine, version, status, worst
    failing: list[str]  # versions of this engine that fail the row as this cell does (run, bisects)
    good_envs: dict[str, EnvDef]  # good versions next to this one → where to run them
    bisects: list[dict]  # every bisect of the row, in either direction
    history: ReleaseHistory
    workaround: dict | None  # precision's finding with a profile that passes
    known_issue: KnownIssue | None
    profiles_here: list[dict] = field(default_factory=list)  # the same model, other profiles, same environment
    notes: list[str] = field(default_factory=list)

    @property
    def product(self) -> str:
        return PRODUCTS[self.envdef.label]

    @property
    def requirements(self) -> list[str]:
        """What `pip install` needs for this environment: a venv's own pins, the pins an image
        built here from a Dockerfile was given, else the engine's package at this version; numpy
        pinned below 2 where the release was built against numpy 1 (it does not import with 2)."""
        if self.envdef.backend == "venv":
            found = list(self.envdef.requirements)
        else:
            found = [value for value in self.envdef.build_args.values() if "==" in value] or \
                [f"{PACKAGES[self.envdef.label]}=={self.version}"]
        if not any(r.startswith("numpy") and r != "numpy" for r in found):
            found = [r for r in found if r != "numpy"] + [numpy_requirement(self.envdef.engine, self.version)]
        return found

    @property
    def commands(self) -> list[str]:
        """How to run repro.py as it ran: in the NGC container for an NGC image, else pip and python."""
        if self.envdef.backend == "docker" and self.envdef.image:
            gpus = "--gpus all " if self.envdef.needs_gpu else ""
            return [f'docker run --rm {gpus}-v "$PWD":/repro -w /repro {self.envdef.image} python3 repro.py']
        return [f"pip install {' '.join(map(shlex.quote, self.requirements))}", "python repro.py"]

    @classmethod
    def gather(cls, plan: Plan, cell: Cell, envdef: EnvDef, own: dict, run_dir: Path | None) -> IssueFacts:
        version = str(own.get("engine_version") or envdef.version)
        frame = read_run(run_dir) if run_dir is not None else None
        findings = read_findings(run_dir) if run_dir is not None else {}
        row = frame[frame["row_id"] == cell.row_id] if frame is not None else pd.DataFrame()
        cells = [{"env": r["env"], "engine": PRODUCTS.get(r["engine"], r["engine"]), "version": r["engine_version"]
                  if isinstance(r["engine_version"], str) else r["env_version"], "status": r["status"],
                  "worst": worst_error(r, 2) or "—", "label": r["engine"], "verdict": r["verdict"],
                  "nan_count": r["nan_count"], "inf_count": r["inf_count"],
                  # a release that refused or raised, in the engine's own words
                  "said": (str(r["error"]).strip().splitlines() or [""])[0] if r["verdict"] not in ("pass", "fail")
                  and isinstance(r["error"], str) else ""}
                 for r in row.to_dict("records")]
        bisects = [f for f in findings.get("bisect", []) if f["row"] == cell.row_id and f["engine"] == envdef.engine]
        workaround = next((f for f in findings.get("precision", []) if f.get("profile")
                           and f["cell"].startswith(cell.row_id + "/")), None)
        verdicts = {step["version"]: step["status"] for found in bisects for step in found.get("tested", [])
                    if step["status"] in MEASURED}
        verdicts.update({c["version"]: c["verdict"] for c in cells if c["label"] == envdef.label and c["version"]
                         and c["verdict"] in MEASURED})
        verdicts[version] = own["verdict"]
        if any(nonfinite(own)):  # a release failing with finite outputs does not have this fault (sweep 7 N7)
            verdicts.update({c["version"]: OTHER_FAULT for c in cells if c["label"] == envdef.label
                             and c["version"] != version and verdicts.get(c["version"]) == "fail" and not any(nonfinite(c))})
        history = ReleaseHistory(version, verdicts)
        failing = [v for v in history.releases if v == version or verdicts[v] == own["verdict"]]
        goods = {v for v in history.releases if history.good(v)}
        facts = cls(plan, cell, envdef, plan.profile(cell.profile), own, version, run_dir.name if run_dir else None,
                    cells, failing, {}, bisects, history, workaround,
                    next((i for i in plan.known_issues if i.id == own.get("known_issue")), None))
        facts.good_envs = facts._good_envs(goods)
        if frame is not None:
            same = frame[(frame["case"] == cell.case) & (frame["env"] == cell.env) & (frame["profile"] != cell.profile)
                         & (frame["params"].map(json.loads) == dict(cell.params))]
            facts.profiles_here = [{"profile": r["profile"], "status": r["status"], "worst": worst_error(r, 2) or "—",
                                    "description": _profile_words(plan, r["profile"])} for r in same.to_dict("records")]
        return facts

    def _good_envs(self, goods: set[str]) -> dict[str, EnvDef]:
        """The good versions next to this one (the newest older, the oldest newer) and the
        environment each runs in: a definition in images/ (a venv first), else a venv made for it."""
        here = version_key(self.version)
        older = [v for v in goods if version_key(v) < here]
        newer = [v for v in goods if version_key(v) > here]
        chosen = [max(older, key=version_key)] if older else []
        chosen += [min(newer, key=version_key)] if newer else []
        known = available_envdefs(self.plan.path("images_dir"))
        found = {}
        for version in chosen:
            try:
                found[version] = envdef_for(self.envdef.engine, version, [e for e in known
                                                                          if e.label == self.envdef.label])
            except BisectError as exc:
                self.notes.append(f"good version {version} not checked: {exc}")
        return found

    @property
    def record_where(self) -> str:
        """Where and how it ran, in the engine's own terms."""
        if self.envdef.engine == "onnxruntime":
            level = "ORT_DISABLE_ALL" if self.profile.optimization == "off" else "ORT_ENABLE_ALL"
            return f"CPUExecutionProvider, graph optimisations {level}" + (", FP16 model" if self.fp16_copy else "")
        gpu = self.own.get("gpu") or "no GPU"
        if self.envdef.engine == "torch":
            return f"{gpu if self.own.get('device') == 'cuda' else 'CPU'}, {self.profile.precision}"
        typing = "strongly typed" if self.envdef.strongly_typed(self.profile) else "weakly typed"
        return f"{gpu}, {self.profile.precision.upper()}, {typing} network"

    @property
    def fp16_copy(self) -> bool:
        return self.envdef.runs_fp16_copy(self.profile)


def numpy_requirement(engine: str, version: str) -> str:
    """onnxruntime before 1.19 was built against numpy 1: with numpy 2 it does not import."""
    if engine == "onnxruntime" and version_key(version) < version_key(NUMPY2_ORT):
        return "numpy<2"
    return "numpy"


def _profile_words(plan: Plan, name: str) -> str:
    """A profile's description, with what it sets (the settings are what tells a fusion from a kernel)."""
    profile = plan.config.profiles.get(name)
    if profile is None:
        return ""
    return "; ".join(text for text in (profile.description, profile_settings(profile)) if text)


def _headline(facts: IssueFacts, what: str | list[str]) -> str:
    """`what`: the op that goes wrong, or the model's ops."""
    if not isinstance(what, str):
        what = ", ".join(what[:4]) + (", …" if len(what) > 4 else "") if what else "the module"
    result = {"error": "raises", "crash": "crashes"}.get(facts.own["verdict"], "wrong outputs")
    return f"{facts.product} {facts.version} ({facts.record_where}): {what}: {result}"


def render_repro_script(facts: IssueFacts, folder: Path, what: str | list[str], record: dict) -> str:
    context = {"headline": _headline(facts, what), "commands": facts.commands,
               "cell": facts.cell.cell_id, "atol": float(facts.own["atol"]), "rtol": float(facts.own["rtol"]),
               "runs": RUNS, "session_word": {"onnxruntime": "session", "tensorrt": "engine"}.get(facts.envdef.engine,
                                                                                               "module")}
    engine = facts.envdef.engine
    if engine == "onnxruntime":
        context["level"] = "ORT_DISABLE_ALL" if facts.profile.optimization == "off" else "ORT_ENABLE_ALL"
    elif engine == "tensorrt":
        context.update(_tensorrt_settings(facts, folder))
    else:
        meta = json.loads((artifact_dir(facts.plan.path("cache_dir"), facts.cell.case, facts.cell.artifact_key)
                           / PROGRAM_META).read_text())
        precision = facts.profile.precision
        context.update(torch_version=meta["torch"], on_cuda=facts.own.get("device") == "cuda",
                       dtype={"fp16": "float16", "bf16": "bfloat16"}.get(precision, "float32"), tf32=precision == "tf32",
                       sdpa=SDPA.get(facts.profile.sdpa_backend or ""), compile=bool(facts.profile.compile),
                       input_order=meta["inputs"], output_names=meta["outputs"])
    return render_script(engine, context)


def _tensorrt_settings(facts: IssueFacts, folder: Path) -> dict:
    strongly = facts.envdef.strongly_typed(facts.profile)
    rtx = facts.envdef.product == "tensorrt-rtx"
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    # A weakly typed network holds keep_fp32's nodes in FP32 by layer settings; a strongly typed
    # one has them in FP32 in the model itself (the FP16 copy).
    keep = [] if strongly or not facts.profile.keep_fp32 else resolve_nodes(model, facts.profile.keep_fp32)
    fp16 = facts.profile.precision == "fp16" and not strongly
    level = 0 if facts.profile.optimization == "off" else None
    flags = (["--fp16"] if fp16 else []) + (["--strongly-typed"] if strongly and not rtx else [])
    if keep:
        flags += ["--precision-constraints", "obey", "--layer-precisions", *(f"{n}:float32" for n in keep)]
    if level is not None:
        flags += ["--builder-optimization-level", str(level)]
    line = " ".join(["POLYGRAPHY_USE_TENSORRT_RTX=1"] * rtx + ["polygraphy", "run", "model.onnx", "--onnxrt", "--trt",
                                                                *flags, "--data-loader-script", "repro.py:load_inputs",
                                                                "--atol", f"{float(facts.own['atol']):g}",
                                                                "--rtol", f"{float(facts.own['rtol']):g}"])
    return {"product_name": facts.product, "module": facts.envdef.module, "rtx": rtx, "strongly_typed": strongly,
            "fp16": fp16, "keep_fp32": keep, "optimization_level": level, "polygraphy": line}


def _description(facts: IssueFacts, repro: Repro, record: dict, ops: list[str]) -> list[str]:
    """The sentences with the numbers: what goes wrong where, where it does not, and the releases."""
    if repro.nodes is None:
        model = "the attached module (program.pt2)"
    else:
        inside = f", {repro.nodes_all} with its subgraphs" if repro.nodes_all != repro.nodes else ""
        model = f"the attached model of {nodes(repro.nodes)}{inside} ({', '.join(ops)})" + (
            f", cut from a model of {nodes(repro.nodes_original)} around its first node to go wrong,"
            if repro.reduced else "")
    said = [outputs_sentence(facts, repro, record, f"On {facts.product} {facts.version} ({facts.record_where}), {model}")]
    goods = [v for v in repro.verified if v.expect == "pass"]
    if goods:
        right = ", ".join(f"{v.version} ({'max_abs ' + v.max_abs if v.max_abs else v.outcome()})" for v in goods)
        said.append(f"On the same files {facts.product} {right} {'gives' if len(goods) == 1 else 'give'} the right "
                    "numbers." if all(v.ok for v in goods) else
                    f"The releases the run found good did not all pass on these files: {right}.")
    fixed = facts.known_issue.fixed if facts.known_issue is not None else None
    said += facts.history.sentences(facts.product, fixed)
    if not goods:
        said.append(f"`trtmatrix bisect ROW --good A --bad B` over the releases finds where that changes.")
    return said


def render_issue_md(facts: IssueFacts, repro: Repro, record: dict, ops: list[str], folder: Path,
                    reference: str, triggers: list[str]) -> str:
    """`folder`: where the files are now (repro.folder is where they go once verified); `reference`:
    where expected.npz comes from."""
    platform = next(iter(re.findall(PLATFORM, repro.verified[0].run.output, re.M)), None)
    others = [c for c in facts.row if c["label"] != facts.envdef.label]
    files = (["program.pt2", "inputs.npz", "expected.npz", "repro.py"] if repro.nodes is None
             else ["model.onnx", "inputs.npz", "expected.npz", "repro.py"])
    with np.load(folder / "expected.npz") as data:
        expected = expected_words(dict(data), reference)
    context = {
        "facts": facts, "repro": repro, "record": record, "ops": ops, "files": files, "platform": platform,
        "sentences": _description(facts, repro, record, ops), "others": others,
        "same_engine": [c for c in facts.row if c["label"] == facts.envdef.label],
        "commands": facts.commands, "history": facts.history,
        "latest": max((c for c in facts.row if c["label"] == facts.envdef.label), key=lambda c: version_key(c["version"]),
                      default=None),
        "container": image_ref(facts.envdef) if facts.envdef.backend == "docker" else None,
        "title": title(facts, repro, record, triggers, ops), "expected": expected,
        "workaround": _workaround(facts), "nodes": nodes,
        "polygraphy": _tensorrt_settings(facts, folder)["polygraphy"] if facts.envdef.engine == "tensorrt" else None,
    }
    return render_issue(facts.envdef.engine, context)


def _workaround(facts: IssueFacts) -> str | None:
    """precision's FP32 fix where it found one; else the run's other profiles that pass here."""
    found = facts.workaround
    if found:
        nodes = ", ".join(f"`{md(n)}`" for n in found["keep_fp32"])
        return f"{found['summary']}: holding {nodes} in FP32 makes the cell pass (found by `trtmatrix precision`)."
    passing = [p for p in facts.profiles_here if p["status"] in ("pass", "xpass")]
    if not passing:
        return None
    return "; ".join(f"the run's profile `{md(p['profile'])}` passes on {facts.product} {facts.version} (worst error "
                     f"{md(p['worst'])})" + (f": {md(p['description'])}" if p["description"] else "")
                     for p in passing) + "."
