"""TensorRT through Polygraphy, for both of NVIDIA's products: ONNX → network → builder config →
serialized engine → (where it can run) inference and the engine inspector's per-layer check.

- TensorRT-RTX (`tensorrt_rtx`, wheels from the package index; POLYGRAPHY_USE_TENSORRT_RTX=1 in
  the environment switches this module and Polygraphy to it): builds strongly typed networks only,
  on any machine, the CPU included. Builds RUN FOR REAL in trtmatrix's tests and CI; inference
  has NOT RUN: it needs a GPU of a compute capability the release supports, and none was lent (the
  H100 is refused, see trt_runnable). Where it cannot run, the cell ends `built` with the reason.
- Full TensorRT (`tensorrt`, NGC containers on GPU hosts): weakly typed by default (FP16 by flag,
  layers held in FP32 under obeyed precision constraints), strongly typed when the profile asks
  (`typing = "strong"`, TensorRT 9+). NOT YET RUN ON REAL TENSORRT from this repository.

Strongly typed networks take their types from the model: FP16 profiles are given the FP16 ONNX
copy (prepare/fp16_variant), whose keep_fp32 nodes sit between casts; the parsed network's types
are checked against keep_fp32 before building. Polygraphy absorbs the API differences between
TensorRT 8.6, 9.x, 10.x and TensorRT-RTX; what this file touches directly exists in all of them
(ILayer.metadata from TensorRT 10 only, read with a default).
"""

import fcntl
import json
import os
import sys
import time

import numpy as np

from . import REPEATS, WARMUP, Refused, Unsupported
from ..layer_select import layer_origins, select_layers
from ..trt_causes import builder_refusal, errors_text, refusal_cause
from ..trt_dtypes import fit_inputs, floating_outputs
from ..trt_inspection import check_fp32_layers, check_network_types
from ..trt_runnable import not_runnable_reason, rtx_capabilities
from ..trt_settings import builder_settings
from ..values import NO_NUMPY_TYPE, category

# Polygraphy staged beside the worker; used only when the image has none of its own.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "_fallback"))

RTX = os.environ.get("POLYGRAPHY_USE_TENSORRT_RTX", "0") != "0"  # read by Polygraphy itself, too
if RTX:
    import tensorrt_rtx as trt  # noqa: E402
else:
    import tensorrt as trt  # noqa: E402
import polygraphy  # noqa: E402
from polygraphy import cuda  # noqa: E402
from polygraphy.backend.trt import (  # noqa: E402
    CreateConfig, Profile, TrtRunner, engine_bytes_from_network, engine_from_bytes, network_from_onnx_path)
from polygraphy.exception import PolygraphyException  # noqa: E402
from polygraphy.logger import G_LOGGER  # noqa: E402

PRODUCT = "TensorRT-RTX" if RTX else "TensorRT"
# The GPUs a TensorRT-RTX engine can run on, from the release's own ComputeCapability enum.
CAPABILITIES = rtx_capabilities(trt.ComputeCapability.__members__) if RTX else None
BUILD_LOG = "tensorrt.log"  # Polygraphy's and TensorRT's own messages, in the cell's folder
LOG_LINES = 60  # the builder's warnings and errors kept with the result
_inferred = []  # whether this process ran an engine (a warm worker's reset checks CUDA then)
_runtime_caches = {}  # TensorRT-RTX: {file: (the runtime config it came from, the cache)}, one per worker


def version():
    return trt.__version__


def reset():
    """After a cell in a warm worker: nothing of the cell stays here (its builder, network and
    engine go with it), its build log is closed. False when CUDA is left unusable (a sticky error
    after an engine ran): the worker must end, a fresh one takes the next cell. Not run with full
    TensorRT; TensorRT-RTX builds ran warm on an H100, where it runs no engine."""
    G_LOGGER.log_file = None
    if not _inferred:
        return True
    try:
        with cuda.Stream() as stream:
            stream.synchronize()
    except Exception:  # noqa: BLE001 - Polygraphy raises its own error for any failed CUDA call
        return False
    return True


def polygraphy_version():
    return polygraphy.__version__


def device():
    return {"device": "cuda"}


def _node_types(spec):
    path = spec.get("node_types")
    if not path or not os.path.exists(path):
        return {}
    with open(path) as fh:
        return json.load(fh)


def _output_dtypes(layer):
    return [layer.get_output(index).dtype.name for index in range(layer.num_outputs)]


def _messages(path):
    """Errors and warnings of TensorRT and Polygraphy, in their own words, without the traceback
    lines Polygraphy logs around its exceptions."""
    try:
        with open(path, errors="replace") as fh:
            lines = [line.rstrip() for line in fh]
    except OSError:
        return []
    kept = [line for line in lines if line[:3] in ("[E]", "[W]", "[!]") and not line[3:].startswith("   ")]
    return [line for line in kept if "'colored' module is not installed" not in line][-LOG_LINES:]


def _apply_layer_settings(network, settings):
    for layer in network:
        if layer.name in settings["layer_precisions"]:
            layer.precision = trt.float32
            for index in floating_outputs(_output_dtypes(layer)):
                layer.set_output_type(index, trt.float32)


def shape_profile(network, inputs, input_shapes):
    """{input: {"min", "opt", "max"}} of the one optimisation profile: over every input set the
    engine serves (`input_shapes`, the case's rows of this model: min and max per dimension, opt
    the first set), else these inputs' own shapes. A shape tensor (an input the network uses as a
    shape: Tile's repeats, Split's sizes) is pinned to these inputs' values (min = opt = max), and
    says so ("pinned"). An input the parser left out of the network (an If's condition it folded)
    has none."""
    found = {}
    for tensor in (network.get_input(i) for i in range(network.num_inputs)):
        if tensor.name not in inputs:
            continue
        array = inputs[tensor.name]
        if tensor.is_shape_tensor:
            values = [int(v) for v in array.ravel()]
            found[tensor.name] = {"min": values, "opt": values, "max": values, "pinned": True}
            continue
        sets = [list(s[tensor.name]) for s in input_shapes or () if tensor.name in s] or [list(array.shape)]
        found[tensor.name] = {"min": [min(d) for d in zip(*sets)], "opt": sets[0], "max": [max(d) for d in zip(*sets)]}
    return found


def _config(settings, shapes, timing_cache, on_this_gpu):
    profile = Profile()
    for name, bounds in shapes.items():
        profile.add(name, min=bounds["min"], opt=bounds["opt"], max=bounds["max"])
    extra = {"profiles": [profile], "load_timing_cache": timing_cache, "tf32": settings["tf32"],
             "profiling_verbosity": getattr(trt.ProfilingVerbosity, settings["profiling_verbosity"])}
    if "builder_optimization_level" in settings:
        extra["builder_optimization_level"] = settings["builder_optimization_level"]
    if not settings["strongly_typed"]:
        extra.update(fp16=settings["fp16"], precision_constraints=settings["precision_constraints"])
    create = CreateConfig(**extra)  # strongly typed: types come from the network, no precision flags
    if not on_this_gpu:  # TensorRT-RTX: for the release's default targets
        return create

    def for_this_gpu(builder, network):
        """TensorRT-RTX, where it can run here: for exactly this GPU (as CreateConfigRTX(use_gpu))."""
        config = create(builder, network)
        config.num_compute_capabilities = 1
        config.set_compute_capability(trt.ComputeCapability.CURRENT, 0)
        return config
    return for_this_gpu


def _check_typing(profile):
    typing = profile.get("typing")
    if RTX and typing == "weak":
        raise Unsupported("TensorRT-RTX builds strongly typed networks only (typing = \"weak\")")
    if typing == "strong" and not hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        raise Unsupported("TensorRT {} has no strongly typed networks (TensorRT 9.0 and later)".format(trt.__version__))
    return RTX or typing == "strong"


def _input_types(spec, inputs):
    """The numpy type names of the model's inputs (a type numpy lacks by its own name)."""
    named = spec.get("value_types") or {}
    return {named.get(name, str(array.dtype)) for name, array in inputs.items() if hasattr(array, "dtype")}


def _parse(spec, inputs, strongly_typed, log_path):
    try:  # TensorRT-RTX networks are strongly typed without being asked
        return network_from_onnx_path(spec["model"], strongly_typed=True if strongly_typed and not RTX else None)
    except PolygraphyException:
        errors = errors_text(_messages(log_path))
        raise Refused("{} — {} {}'s ONNX parser: {}".format(refusal_cause(errors, _input_types(spec, inputs)), PRODUCT,
                                                            trt.__version__, errors)) from None


def _build(spec, inputs, log, can_run):
    """Parse and build: (serialized engine, layer facts, settings, what the build says)."""
    profile = spec["profile"]
    strongly_typed = _check_typing(profile)
    log_path = os.path.join(spec["out_dir"], BUILD_LOG)
    G_LOGGER.log_file = log_path
    start = time.perf_counter()
    builder, network, parser = _parse(spec, inputs, strongly_typed, log_path)
    layers = [(layer.name, getattr(layer, "metadata", ""), _output_dtypes(layer)) for layer in network]
    network_layers = [{"name": layer.name, "type": layer.type.name, "onnx": layer_origins(layer.name, metadata),
                       "dtypes": dtypes} for layer, (_, metadata, dtypes) in zip(network, layers)]
    node_types = _node_types(spec)  # the exported model's nodes (an FP16 copy adds casts of its own)
    fp32_layers = select_layers(layers, node_types, profile["keep_fp32"]) if profile["keep_fp32"] else []
    origins = {name: layer_origins(name, metadata) for name, metadata, _ in layers if name in fp32_layers}
    if strongly_typed and node_types:  # a glob also matches the casts to FP16 the copy put after them
        fp32_layers = [name for name in fp32_layers if set(origins[name]) & set(node_types)]
        origins = {name: origins[name] for name in fp32_layers}
    log("{} layers in the parsed {} network; keep FP32 resolved to {} exact layer names: {}".format(
        len(layers), "strongly typed" if strongly_typed else "weakly typed", len(fp32_layers), origins))
    settings = builder_settings(profile, [] if strongly_typed else fp32_layers, strongly_typed)
    _apply_layer_settings(network, settings)
    # A second build (profile `builds = 2`) searches tactics afresh: with the timing cache it would
    # replay the first build's choices and hide tactic non-determinism. A build that cannot run
    # here times no tactics: TensorRT-RTX only fails to (de)serialise a cache without a GPU.
    timing_cache = spec.get("timing_cache") if can_run and not spec.get("build_index") else None
    shapes = shape_profile(network, inputs, spec.get("input_shapes"))
    config = _config(settings, shapes, timing_cache, on_this_gpu=can_run and RTX)
    try:
        serialized = engine_bytes_from_network((builder, network, parser), config=config, save_timing_cache=timing_cache)
    except PolygraphyException:
        errors = errors_text(_messages(log_path))
        refused = builder_refusal(errors)
        if refused:
            raise Refused("{} — {} {}'s builder: {}".format(refused, PRODUCT, trt.__version__, errors)) from None
        raise RuntimeError("{} {} did not build the engine: {}".format(PRODUCT, trt.__version__, errors)) from None
    build_s = time.perf_counter() - start
    log("engine built in {:.2f}s, {} bytes".format(build_s, serialized.nbytes))
    typing_check = check_network_types(network_layers, fp32_layers) if strongly_typed and fp32_layers else None
    facts = {"build_s": build_s, "engine_bytes": serialized.nbytes, "network_layers": network_layers,
             "build_log": _messages(log_path), "settings": settings, "fp32_layers": fp32_layers,
             "fp32_origins": origins, "network_type_check": typing_check, "shape_profile": shapes,
             "built_by": spec["cell_id"]}
    return bytes(serialized), facts


def _shared_build(spec, inputs, log, can_run):
    """The engine of several rows of one model (spec["engine_file"]): the first of them to get
    here builds it, the others wait and load it, with its build facts; a second build of one
    profile (`builds = 2`, build_index 1) is its own. Without a shared file: a build of its own.
    An engine built with these inputs' shape tensors pinned serves only rows of the same values."""
    path = spec.get("engine_file")
    if not path or spec.get("build_index"):
        return _build(spec, inputs, log, can_run)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path + ".json"):
            with open(path + ".json") as fh:
                facts = json.load(fh)
            if not any(bounds.get("pinned") for bounds in facts["shape_profile"].values()):
                with open(path, "rb") as fh:
                    serialized = fh.read()
                log("engine built by {} loaded: one engine for the case's rows of this model".format(facts["built_by"]))
                return serialized, facts
        serialized, facts = _build(spec, inputs, log, can_run)
        for name, data in ((path, serialized), (path + ".json", json.dumps(facts).encode())):
            with open(name + ".tmp", "wb") as fh:
                fh.write(data)
            os.replace(name + ".tmp", name)
        return serialized, facts


def _unfed(spec):
    """Why the engine cannot run on these values though it builds: a type numpy lacks (bfloat16,
    float8, …) cannot be fed or read back as an array here. None where it can."""
    lacking = [kind for kind in spec.get("value_kinds", ()) if category(kind) == NO_NUMPY_TYPE]
    return "its inputs or outputs are {}, which numpy has no type for: not run".format(
        " and ".join(lacking)) if lacking else None


def run(spec, inputs, log):
    reason = (not_runnable_reason(PRODUCT, trt.__version__, spec.get("device_facts") or {}, CAPABILITIES)
              or _unfed(spec))
    serialized, facts = _shared_build(spec, inputs, log, can_run=reason is None)
    info = {key: facts[key] for key in ("engine_bytes", "network_layers", "build_log", "settings", "fp32_layers",
                                        "fp32_origins", "shape_profile", "built_by")}
    summary = facts["network_type_check"]
    if reason:
        log("built with {} {}; {}".format(PRODUCT, trt.__version__, reason))
        info.update(precision_check=summary)
        return {"runs": [], "build_s": facts["build_s"], "infer_times_ms": [], "info": info,
                "not_run": "built with {} {}; {}".format(PRODUCT, trt.__version__, reason)}

    engine = engine_from_bytes(serialized)
    engine_layers = _engine_layers(engine)
    with open(os.path.join(spec["out_dir"], "engine_layers.json"), "w") as fh:
        json.dump(engine_layers, fh, indent=1)
    summary, details = check_fp32_layers(engine_layers, facts["fp32_layers"], facts["fp32_origins"])
    if summary:
        log("precision check: " + summary)
    bindings = _binding_dtypes(engine)
    feeds, casts = fit_inputs({name: array for name, array in inputs.items() if name in bindings}, bindings)
    for cast in casts:
        log("input " + cast)
    runs, times = [], []
    _inferred.append(True)
    cached = RTX and spec.get("runtime_cache")
    config = _runtime_config(engine, spec["runtime_cache"], log) if cached else None  # alive while its context is
    with TrtRunner(engine.create_execution_context(runtime_config=config) if cached else engine) as runner:
        for index in range(WARMUP + REPEATS):
            outputs = runner.infer(feed_dict=feeds, copy_outputs_to_host=True)
            if index >= WARMUP:
                times.append(runner.last_inference_time() * 1000)
            runs.append({name: np.array(value) for name, value in outputs.items()})
    if cached:
        _save_runtime_cache(spec["runtime_cache"])
    info.update(precision_check=summary, layer_precisions=details, input_casts=casts,
                engine_layer_count=len(engine_layers))
    return {"runs": runs, "build_s": facts["build_s"], "infer_times_ms": times, "info": info}


def _runtime_config(engine, path, log):
    """An execution context's config with this worker's runtime cache: TensorRT-RTX compiles
    kernels when an engine first runs, and the cache keeps them, so a warm worker compiles each once
    and the next run loads them from the file (per image and GPU model: store.cache.engine_caches).
    TensorRT-RTX itself rejects a file of another release, GPU or driver (deserialize returns
    False). NOT RUN: no GPU TensorRT-RTX runs on was lent."""
    config = engine.create_runtime_config()
    if path not in _runtime_caches:
        cache = config.create_runtime_cache()
        loaded = False
        if os.path.exists(path):
            with open(path, "rb") as fh:
                loaded = cache.deserialize(fh.read())
        log("runtime cache {}: {}".format(path, "loaded" if loaded else "empty (none yet, or not for this GPU)"))
        _runtime_caches[path] = (config, cache)
    config.set_runtime_cache(_runtime_caches[path][1])
    return config


def _save_runtime_cache(path):
    """Written whole and renamed, so workers on other GPUs of the model never read half a file."""
    tmp = "{}.{}.tmp".format(path, os.getpid())
    with open(tmp, "wb") as fh:
        fh.write(_runtime_caches[path][1].serialize())
    os.replace(tmp, path)


def _binding_dtypes(engine):
    names = [engine.get_tensor_name(index) for index in range(engine.num_io_tensors)]
    return {name: engine.get_tensor_dtype(name).name for name in names}


def _engine_layers(engine):
    inspector = engine.create_engine_inspector()
    info = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
    return [layer for layer in info.get("Layers", []) if isinstance(layer, dict)]
