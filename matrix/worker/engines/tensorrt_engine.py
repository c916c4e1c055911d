"""TensorRT through Polygraphy: ONNX → network → builder config → engine → inference.

NOT YET RUN ON REAL TENSORRT: trtmatrix's development machines have no GPU and cannot install
TensorRT. The pure parts (profile → settings, pattern → layer names, inspector JSON → verdicts)
are tested on the host; this file is the thin glue to the real API, kept small on purpose.

Polygraphy absorbs the API differences between TensorRT 8.6, 9.x and 10.x (explicit-batch flag,
build_serialized_network, bindings vs named I/O tensors, execute_async_v2 vs v3). What this file
touches directly exists unchanged in all of them: layer.precision, layer.set_output_type,
IEngineInspector (8.2+) with LayerInformationFormat.JSON, ProfilingVerbosity.DETAILED.
"""

import json
import os
import sys
import time

import numpy as np

from ..layer_select import select_names
from ..trt_inspection import check_fp32_layers
from ..trt_settings import builder_settings

# Polygraphy staged beside the worker; used only when the image has none of its own.
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "_fallback"))

import tensorrt as trt  # noqa: E402
from polygraphy.backend.trt import (  # noqa: E402
    CreateConfig, Profile, TrtRunner, engine_from_network, network_from_onnx_path)

WARMUP = 1
REPEATS = 5


def version():
    return trt.__version__


def device():
    return {"device": "cuda"}


def _node_types(spec):
    path = spec.get("node_types")
    if not path or not os.path.exists(path):
        return {}
    with open(path) as fh:
        return json.load(fh)


def _apply_layer_settings(network, settings):
    for layer in network:
        if layer.name in settings["layer_precisions"]:
            layer.precision = trt.float32
            for index in range(layer.num_outputs):
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


def _engine_layers(engine):
    inspector = engine.create_engine_inspector()
    info = json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON))
    return [layer for layer in info.get("Layers", []) if isinstance(layer, dict)]


def run(spec, inputs, log):
    profile = spec["profile"]
    start = time.perf_counter()
    builder, network, parser = network_from_onnx_path(spec["model"])
    node_types = _node_types(spec)
    layers = [(layer.name, node_types.get(layer.name)) for layer in network]
    fp32_layers = select_names(layers, profile["keep_fp32"]) if profile["keep_fp32"] else []
    log("{} layers in the parsed network; keep FP32 resolved to {} exact layer names: {}".format(
        len(layers), len(fp32_layers), fp32_layers))
    settings = builder_settings(profile, fp32_layers)
    _apply_layer_settings(network, settings)
    timing_cache = spec.get("timing_cache")
    config = _config(settings, inputs, timing_cache)
    engine = engine_from_network((builder, network, parser), config=config, save_timing_cache=timing_cache)
    build_s = time.perf_counter() - start
    log("engine built in {:.1f}s".format(build_s))

    engine_layers = _engine_layers(engine)
    with open(os.path.join(spec["out_dir"], "engine_layers.json"), "w") as fh:
        json.dump(engine_layers, fh, indent=1)
    summary, details = check_fp32_layers(engine_layers, fp32_layers)
    if summary:
        log("precision check: " + summary)

    with TrtRunner(engine) as runner:
        for _ in range(WARMUP):
            runner.infer(feed_dict=inputs)
        times = []
        for _ in range(REPEATS):
            outputs = runner.infer(feed_dict=inputs, copy_outputs_to_host=True)
            times.append(runner.last_inference_time() * 1000)
    return {
        "outputs": {name: np.array(value) for name, value in outputs.items()},
        "build_s": build_s,
        "infer_ms": float(np.median(times)),
        "info": {"precision_check": summary, "layer_precisions": details, "fp32_layers": fp32_layers,
                 "engine_layer_count": len(engine_layers), "settings": settings},
    }
