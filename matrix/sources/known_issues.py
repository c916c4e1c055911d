"""The known-issue registry (cases/known_issues.toml) and its effect on verdicts.

Matching is applied to a results frame, not inside a run, so `trtmatrix report` can re-apply it
(and tolerances) to stored results. A known issue never hides a measurement: the raw verdict
stays in `verdict`, the metrics stay as measured, the reported numbers go in their own column.
"""

from __future__ import annotations

import functools
import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal

import onnx
import pandas as pd
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import field_validator, model_validator

from ..config import Items, KeyedError, MatrixConfig, Name, ParamValue, Strict, param_values_problem, read_toml, validate
from ..graph_walk import FLOAT_TYPES, Upstream, node_inputs
from ..statuses import EXPECTED_CAUSE
from ..store.hashing import hash_json
from ..worker.op_kinds import VALUE_MOVING
from .case_files import declared_cases
from .fault_patterns import FaultPattern

REGISTRY = "known_issues.toml"


def registry_path(config_path: Path, config: MatrixConfig) -> Path:
    """The registry a matrix file uses: known_issues.toml beside its case files."""
    return Path(config_path).resolve().parent / config.run.cases_dir / REGISTRY


def value_kind(value) -> str:
    """What a parameter value is, as a match sees it: 2 and 2.0 are one number, `true` is no 1."""
    return "a boolean" if isinstance(value, bool) else "a number" if isinstance(value, (int, float)) else "text"


def _witnesses(specifier: SpecifierSet) -> set[str]:
    """Versions one of which meets `specifier` if any version does: each version it names, and
    versions just beside each (one more or one less in each place, one place deeper, a pre- and a
    post-release), plus the ends. The versions a specifier admits are a range with holes cut out,
    so a range with room in it holds one of these."""
    found = {"0", "0.dev0", "99999"}
    for spec in specifier:
        found.add(spec.version)
        try:
            version = Version(spec.version.removesuffix(".*"))
        except InvalidVersion:  # `===` takes any text
            continue
        release = list(version.release)
        found |= {f"{version.base_version}.dev0", f"{version.base_version}a0", f"{version.base_version}.post1"}
        for place in range(len(release)):
            found.add(".".join(map(str, [*release[:place], release[place] + 1])))
            if release[place]:
                found.add(".".join(map(str, [*release[:place], release[place] - 1, 99999])))
        for depth in range(3):
            found.add(".".join(map(str, [*release, *[0] * depth, 1])))
    return found


class KnownIssue(Strict):
    """A known fault: what it is (`fault`: the pattern of the model that triggers it), where (the
    engine, its versions, a GPU) and what upstream said (`source`, `fixed`). `case`, `profiles` and
    `params` name rows instead, for faults no pattern describes (a whole-model accuracy problem)."""
    id: Name
    title: str
    fault: FaultPattern | None = None
    case: Name | None = None
    profiles: Items[Name] = ()
    params: dict[Name, ParamValue] = {}
    engine: Literal["onnxruntime", "tensorrt", "tensorrt-rtx"]
    versions: str
    gpu: str | None = None  # glob on the GPU name the cell ran on
    expected: Literal["fail", "error", "crash"] = "fail"
    says: str = ""  # words the cell's error holds: what a `fault` entry expecting an error or crash matches
    reported: str = ""
    source: str
    fixed: str = ""  # what the tracker or the release notes say of the fix, with the release

    @field_validator("versions")
    @classmethod
    def _specifier(cls, value: str) -> str:
        if not value.strip():  # an empty specifier matches every version: say which
            raise ValueError("empty: give the versions the issue affects (e.g. '>=10.0,<10.1')")
        try:
            specifier = SpecifierSet(value)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a version specifier: {exc}") from None
        if not any(specifier.contains(v, prereleases=True) for v in _witnesses(specifier)):
            raise ValueError(f"{value!r} matches no version at all: the entry could never apply")
        return value

    @model_validator(mode="after")
    def _what_it_matches(self) -> KnownIssue:
        if self.fault is None and (self.case is None or not self.profiles):
            raise ValueError("give `fault` (the op pattern that triggers it), or `case` and `profiles` (the rows)")
        if self.case is None and (self.params or self.profiles):
            raise ValueError("`params` and `profiles` name rows of `case`: give `case` too")
        if self.fault is not None and self.expected != "fail" and not self.says:
            # issue 41, sweep 11: any error of a model holding the pattern was the entry's
            raise ValueError(f"a `fault` entry expecting {self.expected!r} needs `says`: words of the engine's error "
                             "that tell this fault's from any other error of a model holding the pattern")
        return self

    @field_validator("profiles")
    @classmethod
    def _some_profiles(cls, value: tuple) -> tuple:
        if not value:  # given, but empty: the entry would name no row
            raise ValueError("should have at least 1 item: the profiles of `case` it covers")
        return value

    @field_validator("params")
    @classmethod
    def _param_values(cls, params: dict) -> dict:
        """A value no row can have would never match: the entry would silently do nothing."""
        for name, value in params.items():
            if problem := param_values_problem([value]):
                raise ValueError(f"{name}: {problem[1]}")
        return params

    def matches(self, row: pd.Series) -> bool:
        """The rows it names, and a cell whose model holds its fault and that failed as it says (a
        pattern present where the cell passes is no news: the data did not trigger it)."""
        if row["engine"] != self.engine:
            return False
        found = self.fault is not None and _found_as_now(row, self) and row["verdict"] == self.expected \
            and _as_a_fault_fails(row) and _within_reach(row, self.id, _evidenced(_observed(row, self.id)))
        return (found or self._row_named(row)) and self._covers(row) and self.says in str(row.get("error") or "")

    @property
    def fault_digest(self) -> str | None:
        """The pattern as the registry writes it: kept with each match (faults_found)."""
        return hash_json(self.fault.model_dump(mode="json"))[:16] if self.fault is not None else None

    def unchecked(self, row) -> str | None:
        """Where the cell failed as the entry says in an output its pattern reaches but that also
        reads a node beside the pattern, and the pattern's own output was not observed off on the
        engine (`fault_observed`): which (the cell stays `fail`)."""
        if self.fault is None or row["engine"] != self.engine or not _found_as_now(row, self) \
                or row["verdict"] != self.expected or not _as_a_fault_fails(row) or not self._covers(row) \
                or _evidenced(_observed(row, self.id)):
            return None
        beside = _fault_reach(row.get("faults"))[self.id][1]
        mixed = sorted((_failed(row) or set()) & set(beside))
        return ", ".join(f"{name} also reads {beside[name]}" for name in mixed) or None

    def _covers(self, row) -> bool:
        """The cell's GPU and engine version are among the entry's."""
        if self.gpu and not fnmatchcase(str(row.get("gpu") or ""), self.gpu):
            return False
        try:
            return Version(str(row["engine_version"])) in SpecifierSet(self.versions, prereleases=True)
        except InvalidVersion:
            return False

    def _row_named(self, row) -> bool:
        """The row is one `case`, `profiles` and `params` name."""
        if self.case is None or row["case"] != self.case or row["profile"] not in self.profiles:
            return False
        params = json.loads(row["params"]) if isinstance(row["params"], str) else (row["params"] or {})
        # `true` is no 1, as in the case's own rows
        return not any(k not in params or value_kind(params[k]) != value_kind(v) or params[k] != v
                       for k, v in self.params.items())


def _as_a_fault_fails(row) -> bool:
    """Whether a failure may be a fault pattern's: wrong numbers from the engine, not the user's
    expected file (the engine computed the model right) and not NaN or Inf where the reference is
    finite (no registered fault gives them: a second fault in the same model must not hide)."""
    if str(row.get("error") or "").startswith(EXPECTED_CAUSE):
        return False
    return not any(isinstance(n, (int, float)) and n == n and n > 0 for n in (row.get("nan_count"), row.get("inf_count")))


def _within_reach(row, fault: str, seen_off: bool) -> bool:
    """Whether every output that failed is computed from a node holding the fault, and from nothing
    beside it: a failure of an output the pattern does not reach is another fault's, and one of an
    output that also reads a node beside the pattern (SHAPE_ONLY's note) is no evidence of it unless
    the pattern's own output was observed off on the engine (`seen_off`; a record without the
    reach: yes)."""
    failed = _failed(row)
    reach, beside = _fault_reach(row.get("faults")).get(fault, (None, {}))
    return failed is None or reach is None or (failed <= set(reach) and (seen_off or not failed & set(beside)))


def _observed(row, fault: str) -> dict:
    """What the cell's engine gave for the pattern's own output (column `fault_observed`, written
    by the run for the cells `to_observe` names: pattern_copy.observation), or {}."""
    text = row.get("fault_observed")
    return (json.loads(text) if isinstance(text, str) and text else {}).get(fault) or {}


def _evidenced(observed: dict) -> bool:
    """The observation evidences the fault: the pattern's own output off by more than what it reads
    (sweep 12 E7: a CumSum's 1.0 before a MaxPool is the MaxPool's 1.0; sweep 14 G6: the fusion's 5.0
    after a 0.5 the pool drops is the fault) and, carried through the rest of the model, failing it;
    or the failure gone once it is exposed (the engine computed another graph: pattern_copy.observation)."""
    if observed.get("changed"):
        return True
    own = observed.get("max_abs", 0) > observed.get("inputs_max_abs", 0)
    # carried through the rest of the model, the pattern's own error fails the output as the cell failed
    # (pattern_copy.pattern_explains: sweep 16 J8, J9), where that could be evaluated; else off itself
    return bool(own and (observed["explains"] if "explains" in observed else observed.get("off")))


def _failed(row) -> set[str] | None:
    try:
        return {o["name"] for o in json.loads(row.get("outputs") or "[]") if o.get("mismatch_frac", 0) > 0}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def faults_of(row) -> tuple[str, ...]:
    """The ids of the registry's fault patterns found in the model the cell ran (column `faults`)."""
    return tuple(_fault_reach(row.get("faults")))


def _found_as_now(row, issue: KnownIssue) -> bool:
    """Whether the entry's pattern, as the registry writes it now, is the one found in the cell's model:
    an entry corrected since the run (same id, another op) kept its stale match through `report`
    (issue 41, sweep 16 J15). Records before the pattern's digest: as found."""
    found = json.loads(row.get("faults") or "{}") if isinstance(row.get("faults"), str) else {}
    pattern = found.get(issue.id, {}).get("pattern") if isinstance(found, dict) and isinstance(found.get(issue.id), dict) else None
    return issue.id in faults_of(row) and pattern in (None, issue.fault_digest)


@functools.lru_cache(maxsize=4096)
def _fault_reach(text) -> dict[str, tuple[list[str] | None, dict[str, str]]]:
    """{fault id: (the graph outputs its nodes reach, {such an output: a node beside the pattern it
    also reads})} from a `faults` text, read once, not once per known issue and cell (a suite's
    thousands of cells); a list of ids (older records): reach unknown; a list per id: none beside."""
    found = json.loads(text) if isinstance(text, str) and text else {}
    if not isinstance(found, dict):
        return dict.fromkeys(found, (None, {}))
    return {fault: (reach["reaches"], reach["beside"]) if isinstance(reach, dict) else (reach, {})
            for fault, reach in found.items()}


# Ops whose outputs say a tensor's shape (or element count), never its values: a wrong value
# computed before them (a fault's) cannot change what they give.
#
# A node *beside* a pattern is one an output is computed from that the pattern's nodes neither read
# nor come before, and that computes from the values of the graph's inputs: in `y = Resize(x) +
# Cast(Cast(Cast(m)))` the Resize beside the Cast chain; or from the model's float constants, other
# than by moving them (a Cast of them counts: an engine folds it with the kernel a fault may hold,
# issue 41, sweep 16 J2). A failing output that reads one may be that node's fault: nothing the cell
# measured says the pattern's own output was wrong.
SHAPE_ONLY = {"Shape", "Size"}
# After a pattern, on an engine that observes it (OBSERVED_ON), any node but the VALUE_MOVING ones
# is arithmetic that may make a failure alone (CumSum's cancellation after an exact Neg), so it
# counts as beside the pattern: the cell is `xfail` only where the pattern's own output is off.


def _shape_only(node: onnx.NodeProto) -> bool:
    return node.op_type in SHAPE_ONLY and node.domain in ("", "ai.onnx")


def _float_constant(node: onnx.NodeProto) -> bool:
    value = next((a for a in node.attribute if a.name in ("value", "value_float", "value_floats")), None)
    return node.op_type == "Constant" and value is not None and (value.name != "value" or value.t.data_type in FLOAT_TYPES)


def _computes_beside(node: onnx.NodeProto, valued: set[str], constant: set[str]) -> bool:
    """Whether a node the pattern does not reach computes values beside it (SHAPE_ONLY's note)."""
    reads = node_inputs(node)
    return bool(valued.intersection(reads) or constant.intersection(reads)
                and (node.op_type == "Cast" or node.op_type not in VALUE_MOVING))


def _reached(model: onnx.ModelProto, nodes: list[onnx.NodeProto], observed: bool) -> dict:
    """{"reaches": the graph outputs computed from the values of any of `nodes`' outputs (the reach
    stops at SHAPE_ONLY ops: an output that depends on the pattern only through a Shape is not its),
    "beside": {such an output: a node beside the pattern it also reads (SHAPE_ONLY's note), or, where
    the engine observes the pattern (`observed`), one computing after it (VALUE_MOVING's note)}}."""
    graph = model.graph
    tainted = {name for node in nodes for name in node.output}
    valued = {i.name for i in graph.input} - {i.name for i in graph.initializer}
    constant = {t.name for t in graph.initializer if t.data_type in FLOAT_TYPES}
    for node in graph.node:  # in topological order
        if not _shape_only(node) and tainted.intersection(node_inputs(node)):
            tainted.update(node.output)
        if not _shape_only(node) and valued.intersection(node_inputs(node)):
            valued.update(node.output)
        if _float_constant(node) or constant.intersection(node_inputs(node)):
            constant.update(node.output)
    reaches = [o.name for o in graph.output if o.name in tainted]
    upstream = Upstream(graph)  # one walk for every output the pattern reaches
    before = upstream.of(name for node in nodes for name in node.output)  # the pattern and what it reads
    made = {name for node in nodes for name in node.output}
    # before the pattern, on an engine that observes it: arithmetic whose failure reaches the pattern's
    # output all the same (a CumSum's cancellation before a Pad → MaxPool: issue 41, sweep 12 E7)
    computing_before = [order for order in sorted(before) if observed and not made.intersection(graph.node[order].output)
                        and graph.node[order].op_type not in VALUE_MOVING and not _shape_only(graph.node[order])
                        and valued.intersection(node_inputs(graph.node[order]))]
    beside = {}
    for name in reaches:
        found = [order for order in sorted(upstream.of([name]) - before) if not _shape_only(graph.node[order])
                 and (_computes_beside(graph.node[order], valued, constant) if not tainted.intersection(graph.node[order].output)
                      else observed and graph.node[order].op_type not in VALUE_MOVING)] or computing_before
        if found:
            node = graph.node[found[0]]
            beside[name] = f"{node.name or f'{node.op_type}#{found[0]}'} ({node.op_type})"
    return {"reaches": reaches, "beside": beside}


def faults_found(model: onnx.ModelProto, issues: tuple[KnownIssue, ...], engine: str,
                 optimization: str) -> dict[str, dict]:
    """{id: the graph outputs its nodes reach and what they read beside it (_reached)} of the
    registry's fault patterns for `engine` the model holds, run with graph optimisations
    `optimization` (on or off)."""
    return {issue.id: {**_reached(model, issue.fault.nodes_in(model), engine in OBSERVED_ON), "pattern": issue.fault_digest}
            for issue in issues
            if issue.fault is not None and issue.engine == engine and issue.fault.found_in(model, optimization)}


class Registry(Strict):
    issue: Items[KnownIssue] = ()

    @model_validator(mode="after")
    def _unique_ids(self) -> Registry:
        ids = [issue.id for issue in self.issue]
        for i, issue_id in enumerate(ids):
            if issue_id in ids[:i]:
                raise KeyedError(f"issue.{i}.id", f"duplicate id {issue_id!r} (also issue.{ids.index(issue_id)})")
        return self


def load_registry(path: Path) -> tuple[KnownIssue, ...]:
    if not (path.exists() or path.is_symlink()):  # none; anything else there is read, or refused in one line
        return ()
    return validate(Registry, read_toml(path), path).issue


def matrix_registry(config_path: Path, config: MatrixConfig,
                    issues: tuple[KnownIssue, ...] | None = None) -> tuple[KnownIssue, ...]:
    """The registry's entries (`issues`, default: read from registry_path) as they apply to this
    matrix file's rows. An entry's `case` that a case file beside the registry declares is that
    case file's case: where the matrix's case of that name is its own ONNX file or a suite, it is
    another model that only shares the name, and the entry names none of its rows (its `fault`
    still matches a model holding the pattern)."""
    path = registry_path(config_path, config)
    issues = load_registry(path) if issues is None else issues
    named = {issue.case for issue in issues} & {name for name, entry in config.cases.items()
                                                  if entry.onnx or entry.is_suite}
    kept = named & set(declared_cases(path.parent)[0]) if named else set()
    return tuple(issue.model_copy(update={"case": None, "profiles": (), "params": {}}) if issue.case in kept
                 else issue for issue in issues)


def known_status(row, issues: tuple[KnownIssue, ...]) -> tuple[str, KnownIssue | None]:
    """(status, the issue taken) of one record or row: its verdict, or xfail/xpass."""
    issue = chosen_issue(row, issues)[0]
    return _status(row["verdict"], issue), issue


def chosen_issue(row, issues: tuple[KnownIssue, ...]) -> tuple[KnownIssue | None, list[KnownIssue]]:
    """(the entry taken for this row, every entry that matches it): where several match, the one
    whose `expected` the cell met, else the first."""
    found = [issue for issue in issues if issue.matches(row)]
    return next((i for i in found if i.expected == row["verdict"]), found[0] if found else None), found


def _status(verdict: str, issue: KnownIssue | None) -> str:
    if issue is not None and verdict == issue.expected:
        return "xfail"
    if issue is not None and verdict == "pass":
        return "xpass"
    return verdict


def _reported(verdict: str, issue: KnownIssue, found: list[KnownIssue]) -> str:
    text = f"{issue.title}: {issue.reported} [{issue.source}]"
    if len(found) > 1:
        why = "it expects what the cell did" if verdict == issue.expected else "none expects what the cell did"
        text += f" (known issues {', '.join(i.id for i in found)} all match this cell; {issue.id} is taken: {why})"
    return text


# What matching reads (KnownIssue.matches, chosen_issue): a run's rows as dicts of these columns
# only, not of all seventy (5x faster at thousands of cells: an unchanged re-run pays it twice).
MATCHED = ("cell_id", "case", "engine", "profile", "params", "gpu", "engine_version", "verdict", "faults", "error",
           "nan_count", "inf_count", "outputs", "fault_observed")


def _matched_records(frame: pd.DataFrame) -> list[dict]:
    return frame[[column for column in MATCHED if column in frame]].to_dict("records")


def several_matches(frame: pd.DataFrame, issues: tuple[KnownIssue, ...]) -> list[str]:
    """'<cell id> (a, b: b taken)' for each cell that more than one known issue matches."""
    said = []
    for row in _matched_records(frame):
        issue, found = chosen_issue(row, issues)
        if len(found) > 1:
            said.append(f"{row['cell_id']} ({', '.join(i.id for i in found)}: {issue.id} taken)")
    return said


# Engines on which a pattern's own output is observed by making it a graph output: onnxruntime
# keeps its graph rewrites across an extra output (the cast chain's dropped Cast shows there). TensorRT
# fuses no layer across a network output, so observing would change what runs; torch runs no graph.
OBSERVED_ON = ("onnxruntime",)


def to_observe(records: list[dict], issues: tuple[KnownIssue, ...]) -> list[tuple[str, KnownIssue]]:
    """(cell id, entry) of each failing cell no entry takes whose failing output the entry's pattern
    reaches beside another node, on an engine that can observe the pattern's own output: the few
    cells where observing it tells whether the known issue happened."""
    rows = [{column: record.get(column) for column in MATCHED} for record in records]
    return [(row["cell_id"], issue) for row in rows if chosen_issue(row, issues)[0] is None
            for issue in issues if issue.engine in OBSERVED_ON and issue.unchecked(row)]


def unchecked_patterns(frame: pd.DataFrame, issues: tuple[KnownIssue, ...]) -> list[tuple[str, str]]:
    """(cell id, why) per failing cell no entry took whose model holds an entry's pattern in a failing
    output that also reads a node beside the pattern: not `xfail`, and why (its own output observed
    right, or not observed)."""
    said = []
    for row in _matched_records(frame):
        if chosen_issue(row, issues)[0] is None:
            said += [(row["cell_id"], f"known issue {issue.id}'s pattern is in the model, but {why} beside it: "
                      + _unchecked_because(_observed(row, issue.id))) for issue in issues if (why := issue.unchecked(row))]
    return said


def _unchecked_because(observed: dict) -> str:
    if observed.get("inputs_off") and observed.get("off"):
        return (f"what the pattern reads ({', '.join(observed['inputs_off'])}) was already off on this engine "
                f"(max_abs {observed['inputs_max_abs']:.2e}, its own output {observed['max_abs']:.2e}), so the failure "
                "comes before the pattern and the cell stays fail")
    if observed.get("off") and observed.get("explains") is False:  # sweep 16 J9
        return (f"the pattern's own output ({', '.join(observed['tensors'])}) was off on this engine (max_abs "
                f"{observed['max_abs']:.2e}), but carried through the rest of the model in float64 it does not give "
                "the cell's outputs (within its tolerance), so the failure is something else, or more than the "
                "pattern's, and the cell stays fail")
    if "off" in observed:
        return (f"the pattern's own output ({', '.join(observed['tensors'])}) was observed right on this engine "
                f"(max_abs {observed['max_abs']:.2e}), so the failure is something else and the cell stays fail")
    why = f" ({observed['error']})" if observed.get("error") else ""
    return (f"the pattern's own output was not checked{why}, so the cell stays fail "
            "(`trtmatrix explain` observes it)")


def apply_known_issues(frame: pd.DataFrame, issues: tuple[KnownIssue, ...]) -> pd.DataFrame:
    """Set status xfail/xpass where a known issue matches; fill known_issue and reported."""
    rows = _matched_records(frame)
    chosen = [chosen_issue(row, issues) for row in rows]
    return frame.assign(status=[_status(row["verdict"], issue) for row, (issue, _) in zip(rows, chosen)],
                        known_issue=[issue.id if issue else None for issue, _ in chosen],
                        reported=[_reported(row["verdict"], issue, found) if issue else None
                                  for row, (issue, found) in zip(rows, chosen)])
