"""Prepare, on the host, once per case and parameter set: model.onnx, inputs.npz, reference.npz.

Artifacts live in a content-addressed cache (`<cache>/artifacts/<case>-<key>/`) and are written
to a temporary folder first, so an interrupted prepare never leaves a half-written entry.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import sys
import threading
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from ..config import Profile
from ..graph_walk import slow_in_float64
from ..sources import CaseSpec, Params
from ..sources.onnx_files import as_bfloat16
from ..sources.onnx_suites import suite_label, typed_tensors
from ..acceptance import with_left_alone
from ..store import STEP_DECIDES, STEP_SIDE, mask_sidecar
from ..store.cache import artifacts_folder, digest_memo
from ..store.hashing import hash_files, remembered_digests
from ..stops import removed_at_end
from ..worker.files import INPUTS, PROGRAM_META, file_digest, save_arrays
from ..worker.module_outputs import flat_outputs
from ..worker.values import as_text, save_values
from ..reference.conversion import changed_constants, copy_float64, reduced_values
from ..reference import Reference, expected_reference, onnx_reference, reference_text, torch_reference_check
from ..reference.float64_graph import Float64Values, float64_values
from ..reference.referee import referee_label
from .files_read import changed_since, files_read, recording
from .forward_inputs import bound_by_name, module_and_inputs
from .fingerprint import variant_key
from .fp16_forecast import Forecast
from .fp16_variant import write_fp16_variant
from .graph_checks import graph_warnings
from .kept_warnings import kept_warnings
from .layers import input_types, named, node_types, resolve_nodes
from .torch_module import changed_state, module_state, save_module

MODEL, REFERENCE, META = "model.onnx", "reference.npz", "case.json"
# The model's own evaluation beside a user's expected outputs (reference/__init__.py).
SECOND = "second.npz"
# Beside a user's expected outputs where the model's own evaluation is disputed by a step float32
# rounding decides: the elements it decides, per output (reference/__init__.py, run.py).
DECIDES = "decides.npz"
SIDES = "decided_sides.npz"  # the float64 side of each output a step decides (Reference.sides)
NODE_TYPES = "node_types.json"


def artifact_dir(cache_dir: Path, case: str, key: str) -> Path:
    return artifacts_folder(cache_dir) / f"{case}-{key[:16]}"


# The files every judgement rests on, whose digests META keeps: what the cache hands back is
# checked against them (a file damaged on disk is made again, never judged against).
CHECKED = (MODEL, INPUTS, REFERENCE)


# Files below this size are hashed each time they are checked: a byte rotted in place keeps a file's
# size and time, its identity, and a remembered digest missed it (issue 41, sweep 16 J19).
HASHED_EACH_TIME = 64 << 20


def checked_digests(folder: Path, cache_dir: Path | None = None) -> dict[str, str]:
    """Each checked file's digest; with `cache_dir`, a large one (the model) remembered with the file's
    identity (a re-run does not hash a gigabyte model again; a file replaced or rewritten is hashed anew)."""
    if cache_dir is None:
        return {name: hash_files([folder / name]) for name in CHECKED}
    kept = remembered_digests([folder / name for name in CHECKED], digest_memo(cache_dir, folder))
    return {name: hash_files([folder / name]) if _small(folder / name) else both["sha256"] for name, both in kept.items()}


def _small(path: Path) -> bool:
    try:
        return path.stat().st_size < HASHED_EACH_TIME
    except OSError:
        return False


def file_digests(folder: Path, cache_dir: Path) -> dict[str, str]:
    """Each checked file's worker.files.file_digest, remembered as checked_digests are: what a run
    folder lists for its links to them (store.write_digests)."""
    return {name: both["file"] for name, both in remembered_digests([folder / name for name in CHECKED],
                                                                     digest_memo(cache_dir, folder)).items()}


def artifact_digests(folder: Path) -> dict:
    """The digests of the files a prepared folder's judgements rest on, as its META keeps them."""
    return json.loads((folder / META).read_text())["digests"]


def prepared(cache_dir: Path, case: str, key: str, warn: bool = False) -> Path | None:
    """The artifacts, if an earlier run finished them (META is written last) and the files it
    made are still the files it made; `warn`: a file that is not is named in a warning line (the
    run's own look, not a prepare's that follows it)."""
    ready = prepared_meta(cache_dir, case, key, warn)
    return ready[0] if ready else None


def prepared_meta(cache_dir: Path, case: str, key: str, warn: bool = False) -> tuple[Path, dict] | None:
    """prepared(), with its META as read there."""
    target = artifact_dir(cache_dir, case, key)
    try:
        meta = json.loads((target / META).read_text())
        if (kept := meta.get("digests")) != (found := checked_digests(target, cache_dir)):
            if warn and isinstance(kept, dict):  # a cache damaged (or files swapped) says so (issue 41, sweep 8 A9)
                changed = [name for name in CHECKED if kept.get(name) != found[name]]
                print(f"warning: artifact {target}: {' and '.join(changed)} {'is' if len(changed) == 1 else 'are'} "
                      "not the file prepared (its digest differs); prepared again", file=sys.stderr, flush=True)
            return None
        read = meta.get("files_read") or {}  # what the case's code read, changed since: made again
        return (target, meta) if isinstance(read, dict) and changed_since(read) is None else None
    except (OSError, ValueError):
        return None


def prepare(spec: CaseSpec, params: Params, key: str, cache_dir: Path,
            phase: Callable[[str], None] = lambda _: None, fresh: bool = False, unchecked: str | None = None) -> Path:
    """The case's artifacts for `params`, made now where none are ready (`fresh`: made again); `phase`
    is told what it starts (what never returned, where a deadline ends it: executors/prepare_apart.py);
    `unchecked`: why a user's expected outputs are taken without their extra check (a deadline)."""
    if not fresh and (ready := prepared(cache_dir, spec.name, key)):
        return ready
    target = artifact_dir(cache_dir, spec.name, key)
    with removed_at_end(target.with_name(target.name + ".tmp")) as tmp:  # a failed or stopped prepare leaves none
        return _prepare_in(spec, params, tmp, target, phase, unchecked)


def _prepare_in(spec: CaseSpec, params: Params, tmp: Path, target: Path, phase: Callable[[str], None],
                unchecked: str | None) -> Path:
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if spec.suite is not None:
        meta = _prepare_suite_test(spec, params, tmp)
    else:
        meta = _prepare_onnx_file(spec, params, tmp) if spec.is_onnx_file else _prepare_torch(spec, dict(params), tmp, phase)
    model = onnx.load(str(tmp / MODEL))
    meta["graph_warnings"] = graph_warnings(model)
    meta["operators"] = list(dict.fromkeys(node.op_type for node in model.graph.node))
    inputs = typed_tensors(tmp / INPUTS)
    if spec.entry.mask is not None and spec.entry.mask not in inputs:
        raise ValueError(f"the case's mask {spec.entry.mask!r} is not one of its inputs ({', '.join(inputs)})")
    forecast = Forecast()  # the FP16 forecast and the reference read one float64 pass of the model
    slow = slow_in_float64(model) if spec.is_onnx_file else None
    if unchecked and "reference" in meta:  # the user's file alone: no pass that a deadline stopped once
        float64, meta["fp16_forecast"] = None, None
    else:
        phase("the model's float64 evaluation" + (f" ({slow})" if slow else ""))
        float64 = float64_values(model, inputs, keep=False, each=forecast.see)
        meta["fp16_forecast"] = forecast.result(model)
    mask = None
    if spec.entry.mask is not None:
        if left_alone := mask_left_alone(model, spec.entry.mask):
            mask_sidecar(tmp / INPUTS).write_text(json.dumps({"left_alone": left_alone}, indent=1))
        mask = with_left_alone(inputs[spec.entry.mask], left_alone)
    if spec.suite is None:  # a suite's expected outputs are the spec's own test data
        phase(f"its reference check against {referee_label()}")
        meta.update(_checked_reference(meta, model, inputs, float64, tmp, mask, unchecked))
    meta["digests"] = checked_digests(tmp)
    (tmp / META).write_text(json.dumps({"case": spec.name, "params": dict(params), **meta}, indent=1))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def _prepare_torch(spec: CaseSpec, params: dict, out: Path, phase: Callable[[str], None]) -> dict:
    import torch

    case = spec.torch_case
    # numpy's and Python's global generators too: inputs drawn with np.random.rand are the same on
    # every preparation, --reprepare included (issue 41, sweep 7 N5); numpy takes 0 <= seed < 2**32
    torch.manual_seed(case.seed)
    np.random.seed(case.seed % 2 ** 32)
    random.seed(case.seed)
    default = torch.get_default_dtype()
    try:
        phase("the case's build")
        with recording():  # the files its import and build read: a changed one prepares it again
            getattr(case.build, "imported", lambda: None)()
            # the case file's modules as imported: what the build changes there, the torch engine is given
            before = module_state([name for name, loaded in list(sys.modules.items())
                                   if Path(getattr(loaded, "__file__", None) or "/").parent == Path(case.source).parent])
            module, inputs = module_and_inputs(case.build(**params, **spec.entry.options))
            wide = torch.get_default_dtype() == torch.float64
    finally:  # a case that sets float64 as the default must not make every later case's FP32 cells float64
        torch.set_default_dtype(default)
    state = changed_state(before)
    # judged as deployed: eval mode (BatchNorm's running statistics, no Dropout), said where the case
    # returned it training (issue 41, sweep 10 C3)
    trained = ["the module was in training mode: exported and judged in eval mode (BatchNorm's running "
               "statistics, Dropout off)"] if module.training else []
    # The FP32 model is float32: a module built under a float64 default dtype is made so, FP16 weights
    # widened; but a float64 tensor the user made on purpose is the module's own precision, kept as
    # the user runs it (issue 41, sweep 18 L15: a float64 constant 1 + 2**-30 made 1.0 here, and the
    # reference was another model's)
    module = (module.float() if wide else module._apply(
        lambda t: t.float() if t.is_floating_point() and t.dtype != torch.float64 else t)).eval()
    inputs = bound_by_name(module, inputs)
    names = list(inputs)
    # The FP32 model's inputs are float32 whatever the case made (a float64 default dtype, say),
    # stored as the case returned them before anything calls the module, and each call given its
    # own copy: a module that changes its input in place (`x.mul_(2)`, `nn.ReLU(inplace=True)`
    # first) is judged on the inputs the case returned (issue 41, sweep 8 A3).
    args = tuple((a.float() if a.is_floating_point() else a).detach().clone() for a in inputs.values())
    made_float32 = {f"input {name} is {str(a.dtype).removeprefix('torch.')}: the case's ONNX model takes it as float32"
                    for name, a in inputs.items() if a.is_floating_point() and a.dtype != torch.float32}  # sweep 9 B7
    save_arrays(out / INPUTS, {n: a.numpy() for n, a in zip(names, args)})
    # what the module's own calls read (a weights file its forward loads) counts as its build's (sweep 18 L12)
    with recording(), kept_warnings() as said:
        phase("its ONNX export")
        # As a plain torch.onnx.export, autograd on: under no_grad, MultiheadAttention takes its fused
        # fast path, which no exporter knows (issue 41, sweep 10 C2)
        torch.onnx.export(
            module, _fresh(args), str(out / MODEL),
            input_names=names,
            output_names=list(case.export.output_names),
            dynamic_axes=case.export.dynamic_axes,
            opset_version=case.export.opset,
            dynamo=case.export.dynamo,
        )
        # The reference: the same module and the same inputs, in float64.
        phase("its PyTorch reference (the module in float64)")
        reference = copy.deepcopy(module).double()
        ref_args = tuple(a.double() if a.is_floating_point() else a for a in _fresh(args))
        # tensors the module makes itself (`torch.zeros(4)`) are float64 too, not float32 beside float64
        # inputs (issue 41, sweep 10 C5: "Index put requires the source and destination dtypes match")
        torch.set_default_dtype(torch.float64)
        try:
            with torch.no_grad():
                ref_outputs = flat_outputs(reference(*ref_args))
        finally:
            torch.set_default_dtype(default)
    onnx_outputs = [o.name for o in onnx.load(str(out / MODEL), load_external_data=False).graph.output]
    if len(onnx_outputs) != len(ref_outputs):
        raise ValueError(f"ONNX model has {len(onnx_outputs)} outputs, the module returned {len(ref_outputs)}")
    with kept_warnings() as programs, recording():  # torch.export's own warnings (a GRU's flat weights)
        _save_programs(module, names, onnx_outputs, out, Path(case.source).parent, state)
    reference = {n: _as_numpy(r) for n, r in zip(onnx_outputs, ref_outputs)}
    save_arrays(out / REFERENCE, reference)
    return {
        "kind": "torch",
        "source": str(case.source),
        "description": case.description,
        "seed": case.seed,
        "export": {"opset": case.export.opset, "dynamo": case.export.dynamo,
                   "dynamic_axes": case.export.dynamic_axes},
        "torch": torch.__version__,
        "files_read": files_read(skip=out.parent),
        "reference": reference_text("PyTorch, the case's module in float64", reference, "float64"),
        # Exporter warnings (tracer, deprecation, the dynamo exporter's log) belong with the case, not on the terminal.
        "export_warnings": trained + sorted(said | programs | made_float32),
    }


def _as_numpy(output) -> np.ndarray:
    """A reference output as numpy holds it: floats are float64 already, but for an output the module
    casts to a type numpy lacks (`.to(torch.bfloat16)`), held as float64 of its values; the
    onnxruntime cells say they cannot return it, as for an ONNX file's (issue 41, sweep 8 A9)."""
    import torch

    output = output.detach()
    wider = output.is_floating_point() and output.dtype not in (torch.float16, torch.float32, torch.float64)
    return (output.double() if wider else output).numpy()


def _fresh(args: tuple) -> tuple:
    """A copy of the case's inputs for one call of its module (which may change them in place)."""
    return tuple(a.clone() for a in args)


def _save_programs(module, inputs: list[str], outputs: list[str], out: Path, folder: Path, state: dict) -> None:
    """The module for the torch engine, pickled as it is (torch_module.py: what its cells run), and
    what its cells and repro need to know of it (PROGRAM_META). torch.export's program, which repro
    ships, is traced when a repro asks for it (torch_module.export_program): traced here for every
    dtype, it cost each prepare a second and more, for a folder few cells ever get."""
    import torch

    # Names as in the ONNX export: the inputs file and the reference use them.
    meta = {"torch": torch.__version__, "inputs": inputs, "outputs": outputs, "errors": {}}
    save_module(module, out, meta, folder, state)
    (out / PROGRAM_META).write_text(json.dumps(meta, indent=1))


def _prepare_onnx_file(spec: CaseSpec, params: Params, out: Path) -> dict:
    paths = spec.onnx_paths(params)
    model = onnx.load(str(paths["onnx"]))
    onnx.save(model, str(out / MODEL), save_as_external_data=model.ByteSize() > 1.5e9)
    with np.load(paths["inputs"]) as data:  # checked against the model when the plan was built
        inputs = {n: data[n] for n in data.files}
    bfloat16 = {v.name for v in model.graph.input if v.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16}
    # kept as a suite's values (worker/values.py): bfloat16 as bits, strings as str (bytes decoded),
    # named in the file so an engine that cannot take them says so (issue 41, sweep 8 A4)
    save_values(out / INPUTS, {n: as_bfloat16(a) if n in bfloat16 else a for n, a in inputs.items()})
    meta = {"kind": "onnx", "source": str(paths["onnx"]), "description": "", "input_file": str(paths["inputs"])}
    if "expected" in paths:
        with np.load(paths["expected"]) as data:  # as given: integers stay integers, float32 float32
            expected = {o.name: _as_bits(data[o.name], o.type.tensor_type.elem_type) for o in model.graph.output}
        save_arrays(out / REFERENCE, expected)
        meta["reference"] = reference_text(f"your expected outputs ({paths['expected'].name})", expected)
    return meta


def _storable(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Strings evaluated from string inputs (held as objects, as onnxruntime takes them) as numpy's
    unicode arrays: an object array needs pickle to be read back (issue 41, sweep 8 A4)."""
    return {name: as_text(array) if array.dtype == object else array for name, array in arrays.items()}


def _as_bits(array: np.ndarray, elem_type: int) -> np.ndarray:
    """An expected output of a type numpy lacks (float8, int4…) given as its bit patterns in unsigned
    integers, held as that type: compared bit for bit as the model's own evaluation of it is, not as
    integers whose difference of two codes (126 and 127: 448 and NaN) reads as a distance of 1
    (issue 41, sweep 8 A9)."""
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type) if elem_type else None
    if dtype is not None and dtype.kind == "V" and array.dtype.kind == "u" and array.dtype.itemsize == dtype.itemsize:
        return array.view(dtype)
    return array


def _checked_reference(meta: dict, model: onnx.ModelProto, inputs: dict[str, np.ndarray], float64: Float64Values,
                       out: Path, mask: np.ndarray | None, unchecked: str | None = None) -> dict:
    """The reference, checked (matrix/reference/): a case's PyTorch outputs against its export in
    float64; a user's expected outputs kept with the model's own evaluation beside them (unless
    `unchecked` says why not); an ONNX file's float64 evaluation made and checked against the
    referee. `mask`: the case's, whose left-out elements no rounding-decided step disputes."""
    if meta["kind"] == "torch":
        reference = torch_reference_check(model, inputs, typed_tensors(out / REFERENCE), float64, mask)
        _keep_step_sides(reference, out)
        return {"reference_check": reference.check}
    if "reference" in meta:  # the user's expected outputs
        reference = expected_reference(model, inputs, typed_tensors(out / REFERENCE), meta["reference"], float64, mask,
                                       unchecked)
    else:
        reference = onnx_reference(model, inputs, [o.name for o in model.graph.output], float64, mask)
    save_arrays(out / REFERENCE, _storable(reference.arrays))
    if reference.second:
        save_arrays(out / SECOND, _storable(reference.second))
    if reference.decides and "reference" in meta:  # beside the user's file: a disputed cell is not judged
        save_arrays(out / DECIDES, reference.decides)
        if reference.sides:
            save_arrays(out / SIDES, _storable(reference.sides))
        if reference.float32_side:  # the step's other side: a file or an engine on neither is no step's doing
            save_arrays(out / STEP_SIDE, _storable(reference.float32_side))
    else:
        _keep_step_sides(reference, out)
    return {"reference": reference.how, "reference_check": reference.check}


def _keep_step_sides(reference: Reference, out: Path) -> None:
    """The elements a step decides and the other side of them, where no file stands beside the
    reference: the cell is judged at the others (compare.judged_beside_a_step). A misread node's
    parting has no such elements: its cells are not judged."""
    if reference.decides and reference.check.get("decided"):
        save_arrays(out / STEP_DECIDES, reference.decides)
        save_arrays(out / STEP_SIDE, _storable(reference.float32_side))


def _prepare_suite_test(spec: CaseSpec, params: Params, out: Path) -> dict:
    test = spec.suite_test(params)
    (out / MODEL).write_bytes(test.model)
    save_values(out / INPUTS, test.inputs, test.kinds)
    reference = test.reference()
    save_arrays(out / REFERENCE, reference)
    source = suite_label(spec.entry.suite, spec.entry.suite_dir)
    return {"kind": "suite", "source": source, "description": test.name,
            "reference": reference_text(f"the suite's expected outputs ({source})", reference)}


def mask_array(inputs: Path, name: str | None) -> np.ndarray | None:
    """The case's mask input from an inputs file (None without a mask), with the outputs it leaves
    alone beside it (mask_sidecar)."""
    if name is None:
        return None
    with np.load(inputs) as data:
        mask = data[name]
    side = mask_sidecar(inputs)
    return with_left_alone(mask, json.loads(side.read_text())["left_alone"]) if side.is_file() else mask


def _dims(value: onnx.ValueInfoProto) -> list:
    return [d.dim_param or (d.dim_value if d.HasField("dim_value") else None) for d in value.type.tensor_type.shape.dim]


def mask_left_alone(model: onnx.ModelProto, mask: str) -> dict[str, str]:
    """{output: why} of the outputs whose leading axes the model names otherwise than the mask's
    (`sentence_embedding` [batch, 384] under `attention_mask` [batch, sequence]): padded to 384
    tokens, their leading dimensions are the mask's shape, and they are no tokens (issue 41,
    sweep 18 L20). A model that declares fixed sizes alone tells nothing: the shape decides."""
    given = next((value for value in model.graph.input if value.name == mask), None)
    if given is None or not given.type.tensor_type.HasField("shape"):
        return {}
    axes, left = _dims(given), {}
    for output in model.graph.output:
        named = _dims(output) if output.type.tensor_type.HasField("shape") else []
        other = next((i for i, (a, b) in enumerate(zip(axes, named)) if a is not None and b is not None and a != b), None)
        if len(named) >= len(axes) and other is not None:
            left[output.name] = f"the model names its axis {other} {named[other]!r}, the mask's {axes[other]!r}"
    return left


def case_meta(artifacts: Path) -> dict:
    return json.loads((artifacts / META).read_text())


def _model_facts(model: Path, target: Path, facts) -> Path:
    """`facts(model proto)` as JSON in `target`, made once (cells of one model share it)."""
    if not target.is_file():
        tmp = target.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")  # environments run in threads
        tmp.write_text(json.dumps(facts(onnx.load(str(model), load_external_data=False))))
        tmp.replace(target)
    return target


def node_types_file(artifacts: Path) -> Path:
    """{node name: op type} of the exported model, for the worker's layer selection."""
    return _model_facts(artifacts / MODEL, artifacts / NODE_TYPES, node_types)


def input_types_file(model: Path) -> Path:
    """{op type: its nodes' input element types} of the model a cell runs (an FP16 copy has its
    own), so that an engine's "no kernel for Add(14)" can say for which types."""
    return _model_facts(model, model.with_suffix(".input-types.json"), input_types)


def model_for_profile(artifacts: Path, profile: Profile, fp16_copy: bool) -> Path:
    """`fp16_copy`: the engine runs FP16 profiles as an FP16 copy of the model (onnxruntime, strongly
    typed TensorRT; checked before any cell uses it, see fp16_variant); weakly typed TensorRT takes
    the FP32 model and builder flags. A copy is named by its variant key, so another converter
    version makes a new one. Beside it, what the conversion alone did (copy_facts), and the digests
    of the copy and its float64 evaluation: a damaged one is made again, never judged against."""
    target = copy_path(artifacts, profile, fp16_copy)
    if target is None:
        return artifacts / MODEL
    if not _copy_intact(target):
        model = onnx.load(str(artifacts / MODEL))
        model = named(model) if profile.keep_fp32 else model
        tmp = target.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")  # environments run in threads
        write_fp16_variant(model, resolve_nodes(model, profile.keep_fp32), tmp, artifacts / MODEL)
        _write_copy_facts(model, tmp, artifacts, target)
        tmp.replace(target)
    return target


def _copy_intact(copy: Path) -> bool:
    """Whether the copy and its float64 evaluation are the files written with it (a copy of an
    earlier trtmatrix, without digests, is made again once)."""
    float64, facts = copy_facts(copy)
    try:
        kept = json.loads(facts.read_text())["digests"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    memo = digest_memo(copy.parent.parent.parent, copy.parent).with_suffix(f".{copy.stem}.json")
    found = remembered_digests([path for path in (copy, float64) if path.is_file()], memo)
    return kept == {name: both["file"] for name, both in found.items()}


def copy_path(artifacts: Path, profile: Profile, fp16_copy: bool) -> Path | None:
    """Where the model a profile runs as a copy is kept (None: it runs the model itself)."""
    key = variant_key(profile, fp16_copy)
    return None if key is None else artifacts / f"model.fp16-{key[:16]}.onnx"


def copy_facts(copy: Path) -> tuple[Path, Path]:
    """(the copy's outputs in float64, what its conversion did as JSON: {"changes": the constants it
    clamped, flushed or raised, "reduced_values": how many FP16/BF16 tensors the copy holds, "unsplit": why the
    copy has no float64 evaluation, or null})."""
    return copy.with_suffix(".float64.npz"), copy.with_suffix(".conversion.json")


def _write_copy_facts(original: onnx.ModelProto, written: Path, artifacts: Path, target: Path) -> None:
    """`written`: the copy, still under its temporary name (`target` once these are written)."""
    outputs, changes = copy_facts(target)
    inputs, copy = typed_tensors(artifacts / INPUTS), onnx.load(str(written))
    unsplit = None
    try:
        save_arrays(outputs, copy_float64(copy, inputs))
    except Exception as exc:  # noqa: BLE001 - no float64 evaluation of the copy: the cell is judged, not split
        outputs.unlink(missing_ok=True)
        unsplit = str(exc) if isinstance(exc, ValueError) else f"trtmatrix cannot evaluate the FP16 copy in " \
                                                                 f"float64: {type(exc).__name__}: {exc}"[:400]
    digests = {target.name: file_digest(written), **({outputs.name: file_digest(outputs)} if outputs.is_file() else {})}
    changes.write_text(json.dumps({"changes": changed_constants(original, copy), "reduced_values": reduced_values(copy),
                                   "unsplit": unsplit, "digests": digests}, indent=1))
