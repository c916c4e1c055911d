"""TensorRT through Polygraphy: ONNX → network → builder config → engine → inference.

NOT YET RUN ON REAL TENSORRT: trtmatrix's development machines have no GPU and cannot install
TensorRT. The pure parts (profile → settings, pattern → layer names through the ONNX nodes they
came from, which outputs may be FP32, int64 inputs for INT32 bindings, inspector JSON → verdicts)
are tested on the host; this file is the thin glue to the real API, kept small on purpose.

Polygraphy absorbs the API differences between TensorRT 8.6, 9.x and 10.x (explicit-batch flag,
build_serialized_network, bindings vs named I/O tensors, execute_async_v2 vs v3). What this file
touches directly exists unchanged in all of them: layer.precision, layer.set_output_type,
IEngineInspector (8.2+) with LayerInformationFormat.JSON, ProfilingVerbosity.DETAILED,
ITensor.dtype, the named I/O tensors of ICudaEngine (8.5+); ILayer.metadata only from 10 (read
with a default before).
"""

import json
import os
import sys
import time

import numpy as np

from . import REPEATS, WARMUP
from ..layer_select import layer_origins, select_layers
from ..trt_dtypes import fit_inputs, floating_outputs
from ..trt_inspection import check_fp32_layers
from ..trt_settings import builder_settings

# Polygraphy staged beside the worker; used only when the image has none of its own.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "_fallback"))

import polygraphy  # noqa: E402
import tensorrt as trt  # noqa: E402
from polygraphy.backend.trt import (  # noqa: E402
    CreateConfig, Profile, TrtRunner, engine_from_network, network_from_onnx_path)


def version():
    return trt.__version__


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


def _apply_layer_settings(network, settings):
    for layer in network:
        if layer.name in settings["layer_precisions"]:
            layer.precision = trt.float32
            for index in floating_outputs(_output_dtypes(layer)):
                layer.set_output_type(index, trt.float32)


def _config(settings, inputs, timing_cache):
    profile = Profile()
    for name, array in inputs.items():
        profile.add(name, min=array.shape, opt=array.shape, max=array.shape)
    extra = {}
    if "builder_optimization_level" in settings:
        extra["builder_optimization_level"] = settings["builder_optimization_level"]
    return CreateConfig(fp16=settings["fp16"], tf32=settings["tf32"],
                        precision_constraints=settings["precision_constraints"],
                        profiling_verbosity=getattr(trt.ProfilingVerbosity, settings["profiling_verbosity"]),
                        load_timing_cache=timing_cache, profiles=[profile], **extra)


def _binding_dtypes(engine):
    names = [engine.get_tensor_name(index) for index in range(engine.num_io_tensors)]
    return {name: engine.get_tensor_dtype(name).name for name in names}


def _engine_layers(engine):
    inspector = engine.create_engine_inspector()
    info = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
    return [layer for layer in info.get("Layers", []) if isinstance(layer, dict)]


def run(spec, inputs, log):
    profile = spec["profile"]
    start = time.perf_counter()
    builder, network, parser = network_from_onnx_path(spec["model"])
    layers = [(layer.name, getattr(layer, "metadata", ""), _output_dtypes(layer)) for layer in network]
    fp32_layers = select_layers(layers, _node_types(spec), profile["keep_fp32"]) if profile["keep_fp32"] else []
    origins = {name: layer_origins(name, metadata) for name, metadata, _ in layers if name in fp32_layers}
    log("{} layers in the parsed network; keep FP32 resolved to {} exact layer names: {}".format(
        len(layers), len(fp32_layers), origins))
    settings = builder_settings(profile, fp32_layers)
    _apply_layer_settings(network, settings)
    # A second build (profile `builds = 2`) searches tactics afresh: with the timing cache it would
    # replay the first build's choices and hide tactic non-determinism.
    timing_cache = spec.get("timing_cache") if not spec.get("build_index") else None
    config = _config(settings, inputs, timing_cache)
    engine = engine_from_network((builder, network, parser), config=config, save_timing_cache=timing_cache)
    build_s = time.perf_counter() - start
    log("engine built in {:.1f}s".format(build_s))

    engine_layers = _engine_layers(engine)
    with open(os.path.join(spec["out_dir"], "engine_layers.json"), "w") as fh:
        json.dump(engine_layers, fh, indent=1)
    summary, details = check_fp32_layers(engine_layers, fp32_layers, origins)
    if summary:
        log("precision check: " + summary)

    feeds, casts = fit_inputs(inputs, _binding_dtypes(engine))
    for cast in casts:
        log("input " + cast)
    runs, times = [], []
    with TrtRunner(engine) as runner:
        for index in range(WARMUP + REPEATS):
            outputs = runner.infer(feed_dict=feeds, copy_outputs_to_host=True)
            if index >= WARMUP:
                times.append(runner.last_inference_time() * 1000)
            runs.append({name: np.array(value) for name, value in outputs.items()})
    return {
        "runs": runs,
        "build_s": build_s,
        "infer_ms": float(np.median(times)),
        "info": {"precision_check": summary, "layer_precisions": details, "fp32_layers": fp32_layers,
                 "fp32_origins": origins, "input_casts": casts, "engine_layer_count": len(engine_layers),
                 "settings": settings},
    }
