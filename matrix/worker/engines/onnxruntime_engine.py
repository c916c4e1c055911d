"""onnxruntime on the CPU: the engine that runs everywhere, so the whole matrix runs in CI.

Profile mapping: optimization "off" → ORT_DISABLE_ALL, "on" → ORT_ENABLE_ALL. FP16 profiles get
an FP16 copy of the model made on the host (keep_fp32 ops left in FP32); onnxruntime decides
which FP16 kernels it has, and a missing kernel makes the cell 'skipped', not 'error'.
"""

import time

import numpy as np
import onnxruntime as ort

from . import Unsupported, timed_runs


def version():
    return ort.__version__


def device():
    return {"gpu": None, "device": "cpu"}


def _session(model_path, profile):
    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                                        if profile["optimization"] == "off"
                                        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    try:
        return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        # NOT_IMPLEMENTED: no kernel for an op in this dtype (typical for FP16 on CPU).
        if type(exc).__name__ == "NotImplemented":
            raise Unsupported("onnxruntime {} has no CPU kernel for this model in {}: {}".format(
                ort.__version__, profile["precision"], str(exc).strip()))
        raise


def run(spec, inputs, log):
    """Every inference's outputs are returned (warm-up first): the host judges the worst of them
    and reports any run-to-run drift."""
    start = time.perf_counter()
    session = _session(spec["model"], spec["profile"])
    build_s = time.perf_counter() - start
    log("session created in {:.3f}s with providers {}".format(build_s, session.get_providers()))
    feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    runs, infer_ms = timed_runs(lambda: session.run(names, feeds),
                                lambda outputs: dict(zip(names, (np.asarray(o) for o in outputs))))
    return {"runs": runs, "build_s": build_s, "infer_ms": infer_ms, "info": {}}
