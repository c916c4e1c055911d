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

from ..acceptance import exact_kind, judged_positions
from ..graph_walk import every_node
from .agreement import end_to_end_bound, first_parting, outputs_parting
from .float64_graph import RANDOM_OPS, Float64Values, evaluated_form, float64_values, node_label
from .referee import referee_label, referee_values, referee_version
from .referee_process import RefereeCrashed, RefereeKilled
from .loop_steps import step_in_loop
from .overflow import crossed_an_edge, on_an_edge, overflowed, underflowed
from .rounding import decided_by_rounding
from .steps import parted, parted_at

AGREED, REFEREE, EXPECTED, UNCHECKED, DISPUTED = "agreed", "referee", "expected", "unchecked", "disputed"


class NoReference(ValueError):
    """Neither evaluation gives the model's outputs: the case needs `expected` outputs."""


@dataclass
class Reference:
    arrays: dict[str, np.ndarray]
    how: str  # the cell's `reference`: how it was made and what it holds
    check: dict  # {"verdict", "text", "referee", "parting", "checked_nodes"}
    second: dict[str, np.ndarray] = field(default_factory=dict)  # the independent evaluation (a user's file)
    # Where a disputed evaluation's float64 and float32 outputs part, element by element: the
    # elements a step (an edge, an overflow) float32 rounding decides, kept beside a user's file
    decides: dict[str, np.ndarray] = field(default_factory=dict)
    # The float64 side of each output the step decides: a file holds one side only where, for an
    # output whose length it decides (its mark a single True), it holds this one (issue 41, sweep 15
    # H10), and elsewhere this one or float32_side
    sides: dict[str, np.ndarray] = field(default_factory=dict)
    # The referee's float32 side of the outputs a step decides (decides), where no file stands beside:
    # an engine beyond both sides of the step fails (issue 41, sweep 19 M5)
    float32_side: dict[str, np.ndarray] = field(default_factory=dict)


def reference_text(how: str, arrays: dict[str, np.ndarray], usual: str | None = None) -> str:
    """How a reference was made and what it holds: 'your expected outputs (e.npz): float32', or
    'PyTorch ...: int64 for ids' where some output is not the `usual` type the words already say. Text
    is "string", whatever numpy holds it in (<U3, or the objects onnxruntime gives: issue 41, sweep 8 A4)."""
    by_dtype: dict[str, list[str]] = {}
    for name, array in arrays.items():
        by_dtype.setdefault("string" if array.dtype.kind in "USO" else str(array.dtype), []).append(name)
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


def _fixed(name: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray | None:
    """The value of `name` where the case's inputs or the graph fix it (an input given, an initializer,
    a Constant node's tensor or number), else None."""
    if name in inputs:
        return np.asarray(inputs[name])
    given = next((t for t in model.graph.initializer if t.name == name), None)
    if given is not None:
        return onnx.numpy_helper.to_array(given)
    made = next((n for n in model.graph.node if n.op_type == "Constant" and list(n.output) == [name]), None)
    value = onnx.helper.get_attribute_value(made.attribute[0]) if made is not None and made.attribute else None
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    return np.asarray(value) if isinstance(value, (int, float)) else None


def _drops_at_random(node: onnx.NodeProto, model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> bool:
    """A Dropout draws its mask in training mode only (its third input true) and with a ratio above 0;
    by the spec it is the identity otherwise. Decided by the values the inputs or the graph fix (issue
    41, sweep 8 A8: a training_mode input fed False draws nothing); one that nothing fixes may draw."""
    if node.op_type != "Dropout" or len(node.input) < 3 or not node.input[2]:
        return False
    training = _fixed(node.input[2], model, inputs)
    ratio = _fixed(node.input[1], model, inputs) if node.input[1] else None
    return (training is None or bool(np.any(training))) and (ratio is None or bool(np.any(ratio != 0)))


def _refuse_random(model: onnx.ModelProto, inputs: dict[str, np.ndarray], where: str = "") -> None:
    """A model that draws random numbers has no reference: no two evaluations share a draw."""
    drawn = next((node_label(node, order) + f" ({node.op_type})" for order, node in enumerate(model.graph.node)
                  if node.op_type in RANDOM_OPS or _drops_at_random(node, model, inputs)), None) or \
        next((f"{node.name or node.op_type} ({node.op_type}, in a branch or body)" for node in every_node(model.graph)
              if node.op_type in RANDOM_OPS), None)  # issue 41, sweep 11 D10: judged, draw against draw
    if drawn:  # a case file takes no `expected` outputs; its export, made an ONNX-file case, does
        raise NoReference(f"no reference can be made: node {drawn}{where} draws random numbers, which no two "
                          "evaluations share (an engine's own draw differs from any reference's); judge what "
                          "follows it in a model of its own, or " + ("judge that export as an ONNX-file case with "
                                                                      if where else "give ") +
                          "`expected` outputs made by the same engine and seed")


def _refuses_itself(words: str, model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> str | None:
    """The cause where onnxruntime refuses the model for what it is (an operator or type it lacks, a
    kernel that does not support an attribute: Conv's dilations with auto_pad SAME_LOWER; a kernel that
    fails alike on zeros and ones: float Mod with fmod = 0 before opset 28), in the words its engine
    cells call `unsupported` (worker/engines/onnxruntime_engine.py): no input changes that."""
    from ..worker.engines.onnxruntime_engine import REFUSALS, RUN_REFUSALS, refusal, refused_whatever_the_inputs

    return refusal(words, {}, REFUSALS + RUN_REFUSALS) or \
        refused_whatever_the_inputs(words, inputs, lambda other: referee_values(model, other))


def _cannot_run(refused: str) -> str | None:
    """What to say where onnxruntime failed inside a kernel, on these values (an index out of range,
    an integer division by zero; not what _refuses_itself finds): no reference and no `expected` file
    helps, other inputs do."""
    if "Non-zero status code returned while running" not in refused:
        return None
    return f"the model cannot run on these inputs ({referee_label()}: {refused}): fix the inputs"


ROUNDING_DECIDES = ("is decided by rounding", "a step whose inputs in float32 (held in the types the model declares, "
                    "or as onnxruntime computes them) give other values than in float64, so no reference says which "
                    "the model means")
CROSSES_AN_EDGE = ("leaves its domain in float64", "float64 holds NaN or ±inf there (Sqrt, Log or Pow of an input "
                   "below 0, 1 / 0) where float32, whose rounding put that input on the other side of the edge, "
                   "holds another value, so no reference says which side the model means")


def _judged(array: np.ndarray, mask: np.ndarray | None, name: str) -> np.ndarray:
    """The elements of output `name` the case's mask keeps (acceptance.judged_positions)."""
    kept = judged_positions(mask, array.shape, name)
    return array if kept is None else array[kept]


def _parting(decided: dict[str, str], reference: dict[str, np.ndarray], theirs: dict[str, np.ndarray],
             mask: np.ndarray | None = None) -> dict[str, str]:
    """The outputs of `decided` whose reference and referee values part beyond rounding, on the
    elements the mask keeps: a flipped step an output reaches but does not hang on (`Where(g, x, x)`,
    a hinge at its joint), or whose flip only padding holds, decides nothing judged (issue 41, sweep
    7 N3, N13)."""
    def parts(one: np.ndarray, other: np.ndarray, name: str) -> bool:
        return parted(one, other) if one.shape != other.shape else \
            parted(_judged(one, mask, name), _judged(other, mask, name))
    return {name: step for name, step in decided.items() if name not in theirs or name not in reference
            or parts(np.asarray(reference[name]), np.asarray(theirs[name]), name)}


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


def _underflows(found: dict[str, tuple[str, np.dtype]], names: list[str], checked: int, fix: str) -> dict | None:
    """The disputed check naming where outputs fall below their type's smallest normal value
    (overflow.underflowed): 0 or a subnormal of few bits in the model's own type, which every
    engine shares, where float64 holds the value (issue 41, sweep 18 L2)."""
    first = next((name for name in names if name in found), None)
    if first is None:
        return None
    kind = found[first][1]
    why = (f"falls below {kind}'s smallest normal value ({np.finfo(kind).tiny:.3g})",
           f"{kind} holds 0 there (or a subnormal of a few bits) where float64 holds the value: the model's own "
           f"arithmetic in its declared type, which every engine shares, so no reference says what the {kind} "
           "model gives")
    return _decided({name: where for name, (where, _) in found.items()}, names, checked,
                    f"give inputs whose values fit {kind}, or {fix}", why)


def _overflows(found: dict[str, tuple[str, np.dtype]], theirs: dict[str, np.ndarray], names: list[str],
               checked: int, fix: str) -> dict | None:
    """The disputed check naming where outputs leave their range (overflow.py), in the type the model
    declares at that node: float32's in a float32 model, shared by every engine; a FLOAT16 step's
    (65504) in a float32 model, which an engine that computes the step wider does not share (issue
    41, sweep 9 B3: onnxruntime's CPU Mul gives 70000 where the model's float16 is inf)."""
    first = next((name for name in names if name in found), None)
    if first is None:
        return None
    kind, declared = found[first][1], np.asarray(theirs[first]).dtype
    if kind == declared:
        why = (f"leaves {kind}'s range", f"{kind} holds ±inf there (and NaN after it, inf / inf) where float64 holds "
               f"finite values: the model's own arithmetic in its declared type, which every engine shares, so no "
               f"reference says what the {kind} model gives")
    else:
        why = (f"leaves {kind}'s range ({np.finfo(kind).max:g})",
               f"{kind} is the type the model declares there, and it holds ±inf (and NaN after it, inf / inf) where "
               "float64 holds finite values; an engine that computes that node in a wider type gives finite values, "
               "so no reference says what the model gives")
    return _decided({name: where for name, (where, _) in found.items()}, names, checked,
                    f"give inputs whose values fit {kind}, or {fix}", why)


def _decides(float64: dict[str, np.ndarray], theirs: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """{output: where float64 and the referee's float32 part} (Reference.decides); a single True
    where their shapes differ (a step decides the output's length: all of it)."""
    return {name: parted_at(np.asarray(float64[name]), np.asarray(theirs[name]))
            if np.shape(float64[name]) == np.shape(theirs[name]) else np.array(True)
            for name in names if name in float64 and name in theirs}


def _float32_side(theirs: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    return {name: np.asarray(theirs[name]) for name in names if name in theirs}


def onnx_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray], names: list[str],
                   float64: Float64Values | None = None, mask: np.ndarray | None = None) -> Reference:
    """An ONNX file without expected outputs: float64 (`float64`: its pass, where made already),
    checked node by node against the referee; an output without a float64 evaluation takes the referee's."""
    model = evaluated_form(model)
    _refuse_random(model, inputs)
    float64 = float64 or float64_values(model, inputs, keep=False)
    try:
        theirs = referee_values(model, inputs)
    except RefereeKilled:  # nothing of the model's: the preparation fails, and the next run prepares again
        raise
    except Exception as exc:  # noqa: BLE001 - onnxruntime's words, kept below
        theirs, words = None, str(exc)  # all of them: a cause can lie past the first line's 300 characters
        refused = f"{type(exc).__name__}: {(words.strip().splitlines() or [''])[0]}"[:300]
        # a crash is onnxruntime's own fault (its engine cells crash too: sweep 11 D4), not the model's
        cause = words if isinstance(exc, RefereeCrashed) else _refuses_itself(words, model, inputs)
        if not cause and (said := _cannot_run(refused)):  # one status for one sentence (sweep 9 B2)
            raise NoReference(f"no reference can be made: {said}")
    lacking = [name for name in names if name not in float64.values]
    if lacking and theirs is None and "ShapeInferenceError" in refused:  # sweep 16 J20: no file would help
        raise NoReference(f"no reference can be made: the model is not valid at {_first_missing(float64.missing, model)},"
                          f" where its float64 evaluation fails too, and {referee_label()} refuses to load it "
                          f"({refused}); check it with onnx.checker.check_model(model, full_check=True)")
    if lacking and (theirs is None or any(name not in theirs.values for name in lacking)):
        raise NoReference(f"no reference can be made: no float64 evaluation for {_first_missing(float64.missing, model)}"
                          f" and {referee_label()} cannot run the model ({refused if theirs is None else 'no output'}); "
                          "give the case `expected` outputs")
    arrays = {name: float64.values[name] if name in float64.values else theirs.values[name] for name in names}
    if theirs is None and cause:  # sweep 5 #14: no dispute, and no input to fix
        how = f"onnx.reference, every floating type made float64, not checked (the referee refuses the model: {cause})"
        return Reference(arrays, reference_text(how, arrays, "float64"), _check(
            UNCHECKED, f"not checked: {referee_label()} refuses the model ({refused}); the float64 evaluation stands "
                       "alone"))
    if theirs is None:
        return Reference(arrays, reference_text("onnx.reference, every floating type made float64", arrays, "float64"),
                         _check(DISPUTED, f"not checked: {referee_label()} cannot run the model ({refused}); give "
                                          "the case `expected` outputs"))
    parting, checked = first_parting(model, inputs, theirs.values, float64.inside)
    if not checked:  # no node's value could be held against the referee's: the outputs a step does not decide are
        parting = outputs_parting(float64.values, theirs.values, [name for name in names if name not in float64.decided])
    if parting:  # a Loop parts where its carried float32 state flips a step in its body: name the step
        in_loop = step_in_loop(model, inputs, theirs.values, parting)
        return Reference(arrays, "onnx.reference, every floating type made float64 (disputed)", in_loop and _decided(
            _parting(in_loop.decided, float64.values, theirs.values, mask), names, checked,
            "give inputs away from the step, or `expected` outputs", in_loop.why)
            or _check(DISPUTED, parting.text(theirs.label), parting, checked),
            decides=_decides(float64.values, theirs.values, names), float32_side=_float32_side(theirs.values, names))
    if decided := _decided(_parting(decided_by_rounding(model, inputs, float64, theirs.values), float64.values,
                                    theirs.values, mask), names, checked,
                           "give inputs away from the step, or `expected` outputs") or \
            _overflows(overflowed(model, inputs, float64.values, theirs.values, names), theirs.values, names, checked,
                       "`expected` outputs") or \
            _underflows(underflowed(model, inputs, float64.values, theirs.values, names), names, checked,
                        "`expected` outputs") or \
            _decided(crossed_an_edge(model, inputs, float64.values, theirs.values, names), names, checked,
                     "give inputs away from the edge, or `expected` outputs", CROSSES_AN_EDGE):
        return Reference(arrays, "onnx.reference, every floating type made float64 (disputed)", decided,
                         decides=_decides(float64.values, theirs.values, names),
                         float32_side=_float32_side(theirs.values, names))
    if lacking:
        how = (f"{theirs.label} for {', '.join(lacking)}: no float64 evaluation for "
               f"{_first_missing(float64.missing, model)}")
        check = {**_check(REFEREE, how, None, checked), "referee_outputs": lacking, "referee_version": referee_version()}
        return Reference(arrays, reference_text(how, arrays), check)
    said = f"at every node ({checked} held against each other)" if checked else \
        "at its outputs (no node between could be held against each other: values of types numpy lacks)"
    return Reference(arrays, reference_text("onnx.reference, every floating type made float64", arrays, "float64"),
                     _check(AGREED, f"agrees with {theirs.label} {said}", None, checked))


def expected_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray], expected: dict[str, np.ndarray],
                       how: str, float64: Float64Values | None = None, mask: np.ndarray | None = None,
                       unchecked: str | None = None) -> Reference:
    """A user's expected outputs, as given; the model's own evaluation kept beside them, so that a
    cell that fails only against the file can name the file (run.py). `unchecked`: why that extra
    is not made (a deadline stopped it once: issue 41, sweep 8 A12); the file stays the reference."""
    if unchecked:
        return Reference(expected, how, _check(EXPECTED, f"your file; not checked ({unchecked})"))
    try:
        second = onnx_reference(model, inputs, list(expected), float64, mask)
    except NoReference as exc:
        return Reference(expected, how, _check(EXPECTED, f"your file; not checked ({exc})"))
    if second.check["verdict"] != AGREED:  # only a float64 evaluation the referee agrees with can name the file
        check = _check(EXPECTED, f"your file; the model's own evaluation is not float64 throughout, or disputed "
                                 f"({second.check['text']})")
        # sweep 7 N6: a fail against the file names the step float32 rounding decides (run.py), where
        # it fails at the elements the step decides only (sweep 8 A16)
        decides = second.decides if "decided" in second.check else {}
        return Reference(expected, how, {**check, **({"decided": second.check["decided"]} if "decided" in second.check else {})},
                         decides=decides, sides={name: second.arrays[name] for name in decides if name in second.arrays},
                         float32_side=second.float32_side if decides else {})
    return Reference(expected, how, _check(EXPECTED, f"your file, beside the model's own evaluation ({second.how})"),
                     second.arrays)


def _torch_parts_from_export(mine: np.ndarray, onnx64: np.ndarray, theirs: np.ndarray | None) -> str | None:
    """How PyTorch's float64 output parts from its export's, or None. Booleans and integers (a mask
    `x > 0.3` at x = 0.3f, topk indices over ties, which torch and ONNX's TopK order differently) are
    compared exactly (issue 41, sweep 8 A2); floating outputs within what float32 rounding explains
    (the referee's distance from the export in float64)."""
    if exact_kind(mine) or exact_kind(onnx64):
        differ = int(np.count_nonzero(mine != onnx64))
        return f"{differ} of {mine.size} elements differ (compared exactly)" if differ else None
    mine, onnx64 = mine.astype(np.float64), onnx64.astype(np.float64)
    bound = end_to_end_bound(onnx64, theirs if theirs is not None else onnx64)
    with np.errstate(invalid="ignore"):  # inf - inf where both sides are the same inf: no parting
        delta = float(np.nanmax(np.abs(mine - onnx64), initial=0.0))  # NaN on both sides: no parting
    return f"|Δ| {delta:.3g} where float32 rounding explains {bound:.2g}" if delta > bound else None


def _nan_against_a_number(mine: np.ndarray, onnx64: np.ndarray, model: onnx.ModelProto,
                          inputs: dict[str, np.ndarray], name: str) -> str | None:
    """How PyTorch's float64 output and its export's part where one holds NaN and the other a number,
    or None (issue 41, sweep 8 A15: `torch.sqrt(0.3 - x)` at x = 0.3f is NaN in PyTorch's float64,
    whose 0.3 is a double, and 0 in the export, whose constant is 0.3f), with the export's node at the
    domain's edge where it has one."""
    lone = np.isnan(mine) != np.isnan(onnx64)
    if not lone.any():
        return None
    first = int(np.flatnonzero(lone)[0])
    number = float(onnx64.flat[first] if np.isnan(mine.flat[first]) else mine.flat[first])
    sides = ("PyTorch's", "the export's") if np.isnan(mine.flat[first]) else ("the export's", "PyTorch's")
    at = f" (the export reaches its edge at node {node})" if (node := on_an_edge(model, inputs, name)) else ""
    return (f"NaN in {sides[0]} float64 where {sides[1]} gives {number:.3g} ({int(lone.sum())} of {lone.size} "
            "elements judged): one of them leaves a function's domain (Sqrt or Log below 0, 0 / 0) where the "
            f"other does not{at}, as the export's float32 constants (0.3f for 0.3) can decide; give inputs away "
            "from the edge, or judge its ONNX export as an ONNX-file case with `expected` outputs")


def torch_reference_check(model: onnx.ModelProto, inputs: dict[str, np.ndarray], torch64: dict[str, np.ndarray],
                          float64: Float64Values | None = None, mask: np.ndarray | None = None) -> Reference:
    """PyTorch's float64 outputs (the reference's arrays) held against the exported ONNX model
    evaluated in float64, within what float32 rounding explains (the referee's distance from the
    latter). Where they part though the referee agrees with the export at every node (the export's
    float32 constants, 0.1f for PyTorch's 0.1, put a step on its other side), the elements they part
    at and the export's side are kept (`decides`, `float32_side`): the cell is judged as beside a
    step (issue 41, sweep 19 M11: a flip of 1e-7 against a tolerance of 1e-5 was never judged)."""
    model = evaluated_form(model)
    _refuse_random(model, inputs, " of the case's ONNX export")
    float64 = float64 or float64_values(model, inputs, keep=False)
    try:
        theirs = referee_values(model, inputs).values
    except Exception:  # noqa: BLE001 - the bound then rests on float32's units alone
        theirs = {}
    check = _torch_check(model, inputs, torch64, float64, theirs, mask)
    if not check.get("decided"):
        return Reference(torch64, "", check)
    # where PyTorch's float64 and the referee's float32 part: a step's, a range's elements
    names = [name for name in torch64 if name in theirs]
    return Reference(torch64, "", check, decides=_decides(torch64, theirs, names),
                     float32_side=_float32_side(theirs, names))


def _torch_check(model: onnx.ModelProto, inputs: dict[str, np.ndarray], torch64: dict[str, np.ndarray],
                 float64: Float64Values, theirs: dict[str, np.ndarray], mask: np.ndarray | None) -> dict:
    checked = [name for name in torch64 if name in float64.values and
               (np.asarray(torch64[name]).dtype.kind == "f" or exact_kind(np.asarray(torch64[name])))]
    for name in checked:
        mine, onnx64 = np.asarray(torch64[name]), np.asarray(float64.values[name])
        if mine.shape != onnx64.shape:
            return _check(DISPUTED, f"PyTorch in float64 gives {name!r} shape {list(mine.shape)}, its ONNX export "
                                    f"{list(onnx64.shape)}")
        # sweep 8 A14: only the elements the case's mask keeps can part
        mine, onnx64, their = (_judged(np.asarray(a), mask, name) for a in (mine, onnx64, theirs.get(name, onnx64)))
        if lone := _nan_against_a_number(mine, onnx64, model, inputs, name):  # sweep 8 A15: a lone NaN
            return _check(DISPUTED, f"PyTorch in float64 and its ONNX export in float64 part at {name!r}: {lone}")
        if apart := _torch_parts_from_export(mine, onnx64, their):
            parting, count = first_parting(model, inputs, theirs) if theirs else (None, 0)
            where = f"; {parting.text(referee_label())}" if parting else ""
            said = f"PyTorch in float64 and its ONNX export in float64 part at {name!r}: {apart}{where}"
            names = list(torch64)
            fix = "judge its ONNX export as an ONNX-file case with `expected` outputs"
            # float32's range, which every engine shares, before any reading of the module (sweep 19 M11's x · 1e-50)
            if ranged := theirs and (
                    _overflows(overflowed(model, inputs, float64.values, theirs, names), theirs, names, 0, fix)
                    or _underflows(underflowed(model, inputs, float64.values, theirs, names), names, 0, fix)):
                return ranged
            # the referee agrees with the export node by node, and a step is upstream of the output: their float64
            # readings of one module take two sides of it (not a random draw baked into the export)
            stepped = name in float64.upstream or name in float64.decided
            return {**_check(DISPUTED, said, parting, count),
                    **({"decided": said} if stepped and theirs and not parting else {})}
    decided = decided_by_rounding(model, inputs, float64, theirs)
    if decided.keys() - float64.decided.keys() and first_parting(model, inputs, theirs)[0]:
        decided = float64.decided  # the referee parts from float64 at a node: its flipped step is no rounding
    # Sweep 6 #1: the reference is PyTorch's float64; where it and float32 agree, a step the export's
    # float32 constants (0.1f, 0.3f) move in float64 decides nothing
    decided = _parting(decided, torch64, theirs, mask)
    fix = "judge its ONNX export as an ONNX-file case with `expected` outputs"
    if decided := _decided(decided, list(torch64), 0, f"give inputs away from the step, or {fix}") or \
            _overflows(overflowed(model, inputs, torch64, theirs, list(torch64)), theirs, list(torch64), 0, fix) or \
            _underflows(underflowed(model, inputs, torch64, theirs, list(torch64)), list(torch64), 0, fix) or \
            _decided(crossed_an_edge(model, inputs, torch64, theirs, list(torch64)), list(torch64), 0,
                     f"give inputs away from the edge, or {fix}", CROSSES_AN_EDGE):
        return decided
    unchecked = [name for name in torch64 if name not in checked]
    return _check(AGREED, f"agrees with the ONNX export evaluated in float64 ({len(checked)} output"
                          f"{'s' * (len(checked) != 1)})" + (f"; not checked: {', '.join(unchecked)}" if unchecked else ""))
