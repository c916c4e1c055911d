"""Whose fault a cell's wrong numbers are, before anything is reported upstream (DESIGN: "blame
where it is due").

An engine is blamed only for what it computed: its outputs against the float64 evaluation of the
exact model it ran (the FP16 copy for an FP16 onnxruntime cell, else the model). Where those
agree, the failure is someone else's, and repro says whose in one line instead of writing a
report: the FP16 conversion (the copy's float64 evaluation already differs from the original's),
the user's expected file, or the reference trtmatrix made. Nor is it blamed for a tolerance finer
than its precision holds: where the model computed node by node in its own types (FP16 throughout
an FP16 copy), or exactly on the values its own Casts hold and rounded once (a kernel that computes
in float32), fails too and the engine is within ROUNDING_SLACK of that computation's own error, or
a one-node model is within the reference check's rounding bound, the tolerance is at fault (a
stranger's atol 1e-5 on an FP16 cell got a "verified" MatMul report for onnxruntime's best FP16).
repro asks again of its smallest failing subgraph.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx

from ..acceptance import judge_by_rule
from ..compare import compare_runs, load_runs, settle
from ..plan import Plan
from ..prepare import DECIDES, INPUTS, MODEL, REFERENCE, artifact_dir, case_meta, mask_array, model_for_profile
from ..reference.agreement import first_parting
from ..reference.float64_graph import float64_values
from ..sources.fault_patterns import constants
from ..worker.files import OUTPUTS, REPEATS

FP16_MAX = float(np.finfo(np.float16).max)
# What a profile's precision stores a value in (tf32 keeps float32's storage).
STORED = {"fp32": np.float32, "tf32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}
ROUNDING_SLACK = 2.0  # an engine this many times the exact answer's own rounding error is rounding, not a bug
USERS_FILE = "your expected outputs ("  # how prepare names a reference the user gave (case.json)


@dataclass
class Blame:
    party: str  # engine, tolerance, precision, conversion, expected or reference
    line: str  # one line saying so, with the numbers
    ran_expected: dict[str, np.ndarray] | None = None  # the float64 evaluation of the model the engine ran

    @property
    def engine(self) -> bool:
        return self.party == "engine"


def whose_fault(plan: Plan, cell_id: str, record: dict, outputs_dir: Path) -> Blame:
    """The party to blame for a `fail` cell whose outputs are in `outputs_dir`."""
    cell = plan.cell(cell_id)
    envdef, profile = plan.envs[cell.env], plan.profile(cell.profile)
    artifacts = artifact_dir(plan.path("cache_dir"), cell.case, cell.artifact_key)
    ran_path = model_for_profile(artifacts, profile, envdef.runs_fp16_copy(profile))
    original, ran = onnx.load(str(artifacts / MODEL)), onnx.load(str(ran_path))
    with np.load(artifacts / INPUTS) as data:
        inputs = dict(data)
    with np.load(artifacts / REFERENCE) as data:
        reference = dict(data)
    mask = mask_array(artifacts / INPUTS, plan.config.cases[cell.case].mask)
    accept = plan.config.acceptance(cell.case, cell.profile)
    atol, rtol = float(record["atol"]), float(record["rtol"])

    def verdict(runs: list[dict], against: dict) -> tuple[str, float]:
        judged, worst, _ = compare_runs(runs, against, atol, rtol, mask)
        if accept is not None:
            judged = judge_by_rule(runs, against, accept, atol, rtol, mask)[0]
        return judged, float(worst["max_abs"])

    def beyond(runs: list[dict], against: dict) -> tuple[str, str]:
        """(what the cell's judging asks, what to do where rounding alone fails it): a cell judged by
        an acceptance rule is failed by its rule, not by atol/rtol, and no tolerance passes a cosine
        that an output's NaN or unshared infinity leaves undefined (issue 41, sweep 8 A7)."""
        if accept is None:
            return f"beyond atol {atol:g} + rtol {rtol:g}", "loosen the tolerance (docs/judging.md)"
        fields = judge_by_rule(runs, against, accept, atol, rtol, mask)[1]
        said = f"failing its rule {accept.text()} ({fields['worst_slice'] or 'measured'})"
        if fields["cosine"] is not None and np.isnan(fields["cosine"]):
            return said, ("no rule holds an undefined cosine (a NaN, or an infinity the other side lacks): judge "
                          "that output element-wise (atol/rtol) or mask those elements (docs/judging.md)")
        return said, "loosen the rule (docs/judging.md)"

    def apart(runs: list[dict], against: dict, what: str) -> str:
        """'is 0.525 from <what>', or, for outputs of another shape (no distance), 'has outputs of other
        shapes than <what> (y has shape (1, 2), the reference (1, 3))': <what> is the reference there."""
        worst = compare_runs(runs, against, atol, rtol, mask)[1]
        if worst["wrong_shape"]:
            return f"has outputs of other shapes than {what} ({worst['wrong_shape']})"
        return f"is {float(worst['max_abs']):.3g} from {what}"

    names = list(reference)
    ran64 = _outputs(ran, inputs, names, narrow=ran_path.name == MODEL)  # a copy's casts are the conversion's
    if ran64 is None:  # some node has no float64 evaluation: the engine cannot be cleared
        return Blame("engine", "not checked against a float64 evaluation of the model it ran (some node has none)")
    first, later = load_runs(outputs_dir / OUTPUTS, outputs_dir / REPEATS)
    aside = ""
    if ran_path.name == MODEL and (artifacts / DECIDES).is_file():  # beside an expected file: a step float32
        with np.load(artifacts / DECIDES) as data:  # rounding decides holds no one to its float64 side (sweep 8 A16)
            ran64, aside = settle(ran64, first, dict(data)), ", the elements a step float32 rounding decides left out"
    engine_verdict, engine_gap = verdict([first, *later.values()], ran64)
    what = "the FP16 copy it ran" if ran_path.name != MODEL else "the model"
    own = "the copy's" if ran_path.name != MODEL else "the model's"
    product = f"{record['engine']} {record.get('engine_version') or envdef.version}"

    def rounding_blame(model: onnx.ModelProto, exact: dict, gap: float, who: str, which: str, of: str) -> Blame | None:
        """The tolerance at fault where `model` computed node by node in its own types (numpy's way,
        its outputs rounded to the profile's precision) fails it too, and `who` (`gap` off) is within a factor
        ROUNDING_SLACK of that rounding's own error (an FP16 intermediate a Softmax then
        sharpens is rounding, though the outputs' own rounding is far smaller). `of` names `exact`:
        every distance is said with what it is from (a copy's FP16 arithmetic 1.5e3 from the same
        copy in float64 read as 1.5e3 from the reference, which it was 214 from)."""
        kept = profile.precision.upper()
        # Node by node in its own types (numpy's FP16 arithmetic), or exactly on the values its
        # own Casts hold (a kernel that computes in float32 and rounds once: onnxruntime's FP16
        # LayerNormalization), its outputs rounded to the precision.
        for held, computed in ((_outputs(model, inputs, names, stored=True), f"computed node by node in its own types "
                                f"({kept})"), (_outputs(model, inputs, names), f"computed exactly on the values its "
                                               f"Casts hold, its outputs rounded to {kept},")):
            if held is None:
                continue
            rounded_verdict, rounding_gap = verdict([_rounded(held, profile.precision)], exact)
            # Far further off than the engine, it breaks where the engine kept float32 (a sum that
            # overflows FP16): it says nothing of the engine's rounding then.
            if rounded_verdict == "fail" and rounding_gap / ROUNDING_SLACK <= gap <= ROUNDING_SLACK * rounding_gap:
                break
        else:
            return None
        if not any(np.issubdtype(np.asarray(v).dtype, np.floating) for v in exact.values()):  # booleans, indices
            return Blame("precision", f"{kept} arithmetic decides it, not {record['engine']}'s fault: {which} "
                                      f"{computed} gives these outputs too, and they are "
                                      "compared exactly (no tolerance applies): compare before rounding decides")
        if rounding_gap == np.inf:  # no tolerance passes ±inf: the values do not fit the precision
            return Blame("precision", f"the model's values do not fit {kept}, not {record['engine']}'s fault: "
                                      f"{which} {computed} overflows to ±inf "
                                      f"where float64 holds finite values, and {who} is as far off")
        # Against a copy's own float64 evaluation the distances are not the cell's: its are said too.
        cell = "" if exact is not ran64 or ran_path.name == MODEL else (
            f" (from the reference, the cell's measure, they are "
            f"{verdict([_rounded(held, profile.precision)], reference)[1]:.3g} and {float(record['max_abs']):.3g} off)")
        limit, fix = beyond([_rounded(held, profile.precision)], exact)
        return Blame("tolerance", f"the {'tolerance' if accept is None else 'rule'} is at fault, not "
                                  f"{record['engine']}: {which} {computed} is already {rounding_gap:.3g} off {of}, "
                                  f"{limit}; {who} is {gap:.3g} off it, what {kept} can hold{cell}: {fix}")

    def summing_blame(outputs: dict) -> Blame | None:
        """A model of one node (repro's reduced subgraph, say) whose outputs are within what rounding
        its inputs' terms explains (the bound the reference check holds each node to: a float32
        sum of 256 products rounds in whatever order the engine adds), where one evaluation in
        the model's own types differs from the engine's by its order alone."""
        if len(ran.graph.node) != 1 or not np.isfinite(engine_gap):  # no tolerance passes a NaN or an inf
            return None
        parting, checked = first_parting(ran, inputs, {n: outputs[n] for n in names if n in outputs})
        if not checked or parting is not None:
            return None
        limit, fix = beyond([outputs], ran64)
        return Blame("tolerance", f"the {'tolerance' if accept is None else 'rule'} is at fault, not "
                                  f"{record['engine']}: {product}'s outputs are {engine_gap:.3g} from {what} evaluated "
                                  f"in float64, within what rounding its {ran.graph.node[0].op_type}'s terms explain "
                                  f"(the bound the reference check holds each node to), {limit}: {fix}")

    if engine_verdict == "fail":
        return rounding_blame(ran, ran64, engine_gap, product, what, f"{own} float64 evaluation") or summing_blame(first) or \
            Blame("engine", f"{product}'s outputs are {engine_gap:.3g} from {what} evaluated in float64{aside}", ran64)
    cleared = f"{product} computed {what} right (max_abs {engine_gap:.3g} from its float64 evaluation{aside})"
    if ran_path.name != MODEL:
        original64 = _outputs(original, inputs, names)
        if original64 is not None:
            converted, gap = verdict([ran64], original64)
            if converted == "fail":
                beyond = _out_of_fp16_range(original)  # a constant FP16 cannot hold: the conversion's doing
                computing = f"{product}, computing the copy right,"
                return (None if beyond else rounding_blame(ran, original64, gap, computing, "the FP16 copy",
                                                                   "the original model's float64 evaluation")) or Blame(
                    "conversion", f"the FP16 conversion is at fault, not {record['engine']}: the FP16 copy evaluated in "
                                  f"float64 {apart([ran64], original64, 'the original model evaluated in float64')}"
                                  f"{beyond}; {cleared}")
    how = str(case_meta(artifacts).get("reference", "the reference"))
    if how.startswith(USERS_FILE):
        given = how[len(USERS_FILE):].split(")", 1)[0]
        return Blame("expected", f"your expected file {given} is at fault, not {record['engine']}: the model "
                                 f"evaluated in float64 {apart([ran64], reference, 'it')}; {cleared}")
    return Blame("reference", f"the reference is at fault, not {record['engine']}: the model evaluated in float64 "
                              f"{apart([ran64], reference, 'it')} ({how}); {cleared}")


def _rounded(values: dict[str, np.ndarray], precision: str) -> dict[str, np.ndarray]:
    """The exact outputs as the profile's precision stores them: the best an engine can give."""
    stored = STORED[precision]
    with np.errstate(over="ignore"):  # a value beyond the precision's range is its ±inf: said by the caller
        return {name: value.astype(stored).astype(np.float64) if np.issubdtype(value.dtype, np.floating) else value
                for name, value in values.items()}


def _outputs(model: onnx.ModelProto, inputs: dict, names: list[str], stored: bool = False, narrow: bool = True
             ) -> dict[str, np.ndarray] | None:
    values = float64_values(model, inputs, keep=False, stored=stored, narrow=narrow).values
    return {name: values[name] for name in names} if all(name in values for name in names) else None


def _out_of_fp16_range(model: onnx.ModelProto) -> str:
    """' (constant k: 1e+05, beyond FP16's largest 65504)' for the first such constant."""
    for name, array in constants(model).items():
        if np.issubdtype(array.dtype, np.floating) and array.size and np.nanmax(np.abs(array)) > FP16_MAX:
            return f" (constant {name}: {float(np.nanmax(np.abs(array))):g}, beyond FP16's largest {FP16_MAX:g})"
    return ""
