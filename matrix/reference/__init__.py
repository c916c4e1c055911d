"""The reference: what "right" is for every cell, and why it can be trusted.

Every verdict is an engine against a reference, so the reference is checked, never trusted: it is
held against a second, independent evaluation of the same model before any cell is judged against
it (DESIGN.md, "The reference is checked").

- float64_graph: the model in float64, node by node, each node at the model's own opsets;
- ops: onnx.reference ops that break the spec, replaced;
- referee: onnxruntime's CPU provider, optimisations off, in the model's own types;
- agreement: where the two part, node by node, within what rounding explains.

A check ends in one of: "agreed" (judge as usual), "referee" (some output has no float64
evaluation: the referee's output is its reference, said), "expected" (a user's file: the second
evaluation is kept, and a cell that fails only against the file names the file), "unchecked" (the
referee refuses the model for what it is, as onnxruntime's own cells will: the float64 evaluation
stands alone, said), or "disputed" (no cell is judged against it). No reference at all is NoReference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from ..acceptance import judged_positions
from .agreement import end_to_end_bound, first_parting, outputs_parting
from .float64_graph import RANDOM_OPS, Float64Values, float64_values, inlined, node_label
from .loop_steps import step_in_loop
from .referee import referee_label, referee_values
from .overflow import crossed_an_edge, overflowed
from .rounding import decided_by_rounding
from .steps import parted

AGREED, REFEREE, EXPECTED, UNCHECKED, DISPUTED = "agreed", "referee", "expected", "unchecked", "disputed"


class NoReference(ValueError):
    """Neither evaluation gives the model's outputs: the case needs `expected` outputs."""


@dataclass
class Reference:
    arrays: dict[str, np.ndarray]
    how: str  # the cell's `reference`: how it was made and what it holds
    check: dict  # {"verdict", "text", "referee", "parting", "checked_nodes"}
    second: dict[str, np.ndarray] = field(default_factory=dict)  # the independent evaluation (a user's file)


def reference_text(how: str, arrays: dict[str, np.ndarray], usual: str | None = None) -> str:
    """How a reference was made and what it holds: 'your expected outputs (e.npz): float32', or
    'PyTorch ...: int64 for ids' where some output is not the `usual` type the words already say."""
    by_dtype: dict[str, list[str]] = {}
    for name, array in arrays.items():
        by_dtype.setdefault(str(array.dtype), []).append(name)
    said = [f"{dtype} for {', '.join(names)}" if len(by_dtype) > 1 else dtype
            for dtype, names in by_dtype.items() if dtype != usual]
    return f"{how}: {'; '.join(said)}" if said else how


def _check(verdict: str, text: str, parting=None, checked: int = 0) -> dict:
    return {"verdict": verdict, "text": text, "referee": referee_label(),
            "parting": parting.as_dict() if parting else None, "checked_nodes": checked}


def _first_missing(missing: dict[str, str], model: onnx.ModelProto) -> str:
    """'com.microsoft Gelu (node gelu_1)': the first node without a float64 evaluation."""
    if not missing:  # every node evaluated: what lacks a value is a sequence, not a tensor
        return "a sequence output (a list of tensors, not one tensor)"
    label = next(iter(missing))
    node = next(node for order, node in enumerate(model.graph.node) if node_label(node, order) == label)
    return f"{f'{node.domain} ' if node.domain else ''}{node.op_type} (node {label})"


def _drops_at_random(node: onnx.NodeProto, model: onnx.ModelProto) -> bool:
    """A Dropout in training mode (its third input given, and not a constant False) draws its mask."""
    if node.op_type != "Dropout" or len(node.input) < 3 or not node.input[2]:
        return False
    given = next((t for t in model.graph.initializer if t.name == node.input[2]), None)
    return given is None or bool(np.any(onnx.numpy_helper.to_array(given)))


def _refuse_random(model: onnx.ModelProto, where: str = "") -> None:
    """A model that draws random numbers has no reference: no two evaluations share a draw."""
    drawn = next((node_label(node, order) + f" ({node.op_type})" for order, node in enumerate(model.graph.node)
                  if node.op_type in RANDOM_OPS or _drops_at_random(node, model)), None)
    if drawn:  # a case file takes no `expected` outputs; its export, made an ONNX-file case, does
        raise NoReference(f"no reference can be made: node {drawn}{where} draws random numbers, which no two "
                          "evaluations share (an engine's own draw differs from any reference's); judge what "
                          "follows it in a model of its own, or " + ("judge that export as an ONNX-file case with "
                                                                      if where else "give ") +
                          "`expected` outputs made by the same engine and seed")


def _refuses_itself(refused: str) -> str | None:
    """The cause where onnxruntime refuses the model for what it is (an operator or type it lacks, a
    kernel that does not support an attribute: Conv's dilations with auto_pad SAME_LOWER), in the words
    its engine cells call `unsupported` (worker/engines/onnxruntime_engine.py): no input changes that."""
    from ..worker.engines.onnxruntime_engine import REFUSALS, RUN_REFUSALS, refusal

    return refusal(refused, {}, REFUSALS + RUN_REFUSALS)


def _cannot_run(refused: str) -> str | None:
    """What to say where onnxruntime failed inside a kernel, on these values (an index out of range,
    an integer division by zero): no reference and no `expected` file helps, other inputs do."""
    if "Non-zero status code returned while running" not in refused or _refuses_itself(refused):
        return None
    return f"the model cannot run on these inputs ({referee_label()}: {refused}): fix the inputs"


ROUNDING_DECIDES = ("is decided by rounding", "a step whose inputs in float32 (held in the types the model declares, "
                    "or as onnxruntime computes them) give other values than in float64, so no reference says which "
                    "the model means")
FLOAT32_OVERFLOWS = ("leaves float32's range", "float32 holds ±inf there (and NaN after it, inf / inf) where float64 "
                     "holds finite values: the model's own arithmetic in its declared type, which every engine "
                     "shares, so no reference says what the float32 model gives")
CROSSES_AN_EDGE = ("leaves its domain in float64", "float64 holds NaN or ±inf there (Sqrt, Log or Pow of an input "
                   "below 0, 1 / 0) where float32, whose rounding put that input on the other side of the edge, "
                   "holds another value, so no reference says which side the model means")


def _judged(array: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The elements of an output the case's mask keeps (acceptance.judged_positions)."""
    kept = judged_positions(mask, array.shape)
    return array if kept is None else array[kept]


def _parting(decided: dict[str, str], reference: dict[str, np.ndarray], theirs: dict[str, np.ndarray],
             mask: np.ndarray | None = None) -> dict[str, str]:
    """The outputs of `decided` whose reference and referee values part beyond rounding, on the
    elements the mask keeps: a flipped step an output reaches but does not hang on (`Where(g, x, x)`,
    a hinge at its joint), or whose flip only padding holds, decides nothing judged (issue 41, sweep
    7 N3, N13)."""
    def parts(one: np.ndarray, other: np.ndarray) -> bool:
        return parted(one, other) if one.shape != other.shape else parted(_judged(one, mask), _judged(other, mask))
    return {name: step for name, step in decided.items()
            if name not in theirs or name not in reference or parts(np.asarray(reference[name]), np.asarray(theirs[name]))}


def _decided(decided: dict[str, str], names: list[str], checked: int, fix: str,
             why: tuple[str, str] = ROUNDING_DECIDES) -> dict | None:
    """The disputed check naming the outputs of `names` float32 decides at a node (`why`: rounding,
    rounding.py; its range, overflow.py), or None."""
    first, *more = [name for name in names if name in decided] or [None]
    if first is None:
        return None
    verb, because = why
    # outputs decided at the first one's node are named once ("(and 'trace')"), the node not said again
    also = ", ".join(f"{name!r}" + (f" at node {decided[name]}" if decided[name] != decided[first] else "") for name in more)
    also = f" (and {also})" if more else ""
    where = f"output {first!r} {verb} at node {decided[first]}{also}"
    return {**_check(DISPUTED, f"{where}: {because}; {fix}", None, checked), "decided": where}


def onnx_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray], names: list[str],
                   float64: Float64Values | None = None, mask: np.ndarray | None = None) -> Reference:
    """An ONNX file without expected outputs: float64 (`float64`: its pass, where made already),
    checked node by node against the referee; an output without a float64 evaluation takes the referee's."""
    model = inlined(model)
    _refuse_random(model)
    float64 = float64 or float64_values(model, inputs, keep=False)
    try:
        theirs = referee_values(model, inputs)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's words, kept below
        theirs, refused = None, f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:300]
    lacking = [name for name in names if name not in float64.values]
    if lacking and (theirs is None or any(name not in theirs.values for name in lacking)):
        if theirs is None and (said := _cannot_run(refused)):
            raise NoReference(f"no reference can be made: {said}")
        raise NoReference(f"no reference can be made: no float64 evaluation for {_first_missing(float64.missing, model)}"
                          f" and {referee_label()} cannot run the model ({refused if theirs is None else 'no output'}); "
                          "give the case `expected` outputs")
    arrays = {name: float64.values[name] if name in float64.values else theirs.values[name] for name in names}
    if theirs is None and (cause := _refuses_itself(refused)):  # sweep 5 #14: no dispute, and no input to fix
        how = f"onnx.reference, every floating type made float64, not checked (the referee refuses the model: {cause})"
        return Reference(arrays, reference_text(how, arrays, "float64"), _check(
            UNCHECKED, f"not checked: {referee_label()} refuses the model ({refused}); the float64 evaluation stands "
                       "alone"))
    if theirs is None:
        said = _cannot_run(refused) or f"{referee_label()} cannot run the model ({refused}); give the case `expected` outputs"
        return Reference(arrays, reference_text("onnx.reference, every floating type made float64", arrays, "float64"),
                         _check(DISPUTED, f"not checked: {said}"))
    parting, checked = first_parting(model, inputs, theirs.values)
    if not checked:  # no node's value could be held against the referee's: the outputs are
        parting = outputs_parting(float64.values, theirs.values, names)
    if parting:  # sweep 7 N12: a Loop parts where a step in its body flips: name the step
        in_loop = step_in_loop(model, inputs, theirs.values, parting)
        return Reference(arrays, "onnx.reference, every floating type made float64 (disputed)", in_loop and _decided(
            _parting(in_loop.decided, float64.values, theirs.values, mask), names, checked,
            "give inputs away from the step, or `expected` outputs", in_loop.why)
            or _check(DISPUTED, parting.text(theirs.label), parting, checked))
    if decided := _decided(_parting(decided_by_rounding(model, inputs, float64, theirs.values), float64.values,
                                    theirs.values, mask), names, checked,
                           "give inputs away from the step, or `expected` outputs") or \
            _decided(overflowed(model, inputs, float64.values, theirs.values, names), names, checked,
                     "give inputs whose values fit float32, or `expected` outputs", FLOAT32_OVERFLOWS) or \
            _decided(crossed_an_edge(model, inputs, float64.values, theirs.values, names), names, checked,
                     "give inputs away from the edge, or `expected` outputs", CROSSES_AN_EDGE):
        return Reference(arrays, "onnx.reference, every floating type made float64 (disputed)", decided)
    if lacking:
        how = (f"{theirs.label} for {', '.join(lacking)}: no float64 evaluation for "
               f"{_first_missing(float64.missing, model)}")
        return Reference(arrays, reference_text(how, arrays), _check(REFEREE, how, None, checked))
    said = f"at every node ({checked} held against each other)" if checked else \
        "at its outputs (no node between could be held against each other: values of types numpy lacks)"
    return Reference(arrays, reference_text("onnx.reference, every floating type made float64", arrays, "float64"),
                     _check(AGREED, f"agrees with {theirs.label} {said}", None, checked))


def expected_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray], expected: dict[str, np.ndarray],
                       how: str, float64: Float64Values | None = None, mask: np.ndarray | None = None) -> Reference:
    """A user's expected outputs, as given; the model's own evaluation kept beside them, so that a
    cell that fails only against the file can name the file (run.py)."""
    try:
        second = onnx_reference(model, inputs, list(expected), float64, mask)
    except NoReference as exc:
        return Reference(expected, how, _check(EXPECTED, f"your file; not checked ({exc})"))
    if second.check["verdict"] != AGREED:  # only a float64 evaluation the referee agrees with can name the file
        check = _check(EXPECTED, f"your file; the model's own evaluation is not float64 throughout, or disputed "
                                 f"({second.check['text']})")
        # sweep 7 N6: a fail against the file names the step float32 rounding decides (run.py)
        return Reference(expected, how, {**check, **({"decided": second.check["decided"]} if "decided" in second.check else {})})
    return Reference(expected, how, _check(EXPECTED, f"your file, beside the model's own evaluation ({second.how})"),
                     second.arrays)


def torch_reference_check(model: onnx.ModelProto, inputs: dict[str, np.ndarray], torch64: dict[str, np.ndarray],
                          float64: Float64Values | None = None, mask: np.ndarray | None = None) -> dict:
    """PyTorch's float64 outputs held against the exported ONNX model evaluated in float64, within
    what float32 rounding explains (the referee's distance from the latter)."""
    model = inlined(model)
    _refuse_random(model, " of the case's ONNX export")
    float64 = float64 or float64_values(model, inputs, keep=False)
    try:
        theirs = referee_values(model, inputs).values
    except Exception:  # noqa: BLE001 - the bound then rests on float32's units alone
        theirs = {}
    checked = [name for name in torch64 if name in float64.values and np.asarray(torch64[name]).dtype.kind == "f"]
    for name in checked:
        mine, onnx64 = np.asarray(torch64[name], np.float64), float64.values[name]
        if mine.shape != onnx64.shape:
            return _check(DISPUTED, f"PyTorch in float64 gives {name!r} shape {list(mine.shape)}, its ONNX export "
                                    f"{list(onnx64.shape)}")
        bound = end_to_end_bound(onnx64, theirs[name]) if name in theirs else end_to_end_bound(onnx64, onnx64)
        with np.errstate(invalid="ignore"):  # inf - inf where both sides are the same inf: no parting
            delta = float(np.nanmax(np.abs(mine - onnx64), initial=0.0))  # NaN on both sides: no parting
        if delta > bound:
            parting, count = first_parting(model, inputs, theirs) if theirs else (None, 0)
            where = f"; {parting.text(referee_label())}" if parting else ""
            return _check(DISPUTED, f"PyTorch in float64 and its ONNX export in float64 part at {name!r}: |Δ| "
                                    f"{delta:.3g} where float32 rounding explains {bound:.2g}{where}", parting, count)
    decided = decided_by_rounding(model, inputs, float64, theirs)
    if decided.keys() - float64.decided.keys() and first_parting(model, inputs, theirs)[0]:
        decided = float64.decided  # the referee parts from float64 at a node: its flipped step is no rounding
    # Sweep 6 #1: the reference is PyTorch's float64; where it and float32 agree, a step the export's
    # float32 constants (0.1f, 0.3f) move in float64 decides nothing
    decided = _parting(decided, torch64, theirs, mask)
    fix = "judge its ONNX export as an ONNX-file case with `expected` outputs"
    if decided := _decided(decided, list(torch64), 0, f"give inputs away from the step, or {fix}") or \
            _decided(overflowed(model, inputs, torch64, theirs, list(torch64)), list(torch64), 0,
                     f"give inputs whose values fit float32, or {fix}", FLOAT32_OVERFLOWS) or \
            _decided(crossed_an_edge(model, inputs, torch64, theirs, list(torch64)), list(torch64), 0,
                     f"give inputs away from the edge, or {fix}", CROSSES_AN_EDGE):
        return decided
    unchecked = [name for name in torch64 if name not in checked]
    return _check(AGREED, f"agrees with the ONNX export evaluated in float64 ({len(checked)} output"
                          f"{'s' * (len(checked) != 1)})" + (f"; not checked: {', '.join(unchecked)}" if unchecked else ""))
