"""One module per engine, each with `version()`, `device()` and `run(...)`; imported lazily so
an environment only needs the engine it runs."""

import importlib
import json
import os
import time

WARMUP = 1   # inferences before the timed ones; their outputs are kept and judged like the rest
# Timed inferences: infer_ms is their median. Enough for a speed change to be tested (a two-sided
# Mann-Whitney U test needs 7 a side to reach p < 0.002: report/timing.py).
REPEATS = 10

MODULES = {"onnxruntime": "onnxruntime_engine", "tensorrt": "tensorrt_engine", "torch": "torch_engine"}
# Whether a cell (or a warm worker) may be a fork of a supervisor that imported the engine
# (supervisor.py). onnxruntime on the CPU: yes (its thread pools start with a session, not at
# import). TensorRT: no where a GPU is visible (CUDA state must never cross a fork: a warm worker
# imports it after the fork; not run on real TensorRT yet); yes for TensorRT-RTX builds with no GPU
# (CUDA_VISIBLE_DEVICES empty): they touch no CUDA at all (tested: forked builds here). PyTorch: yes:
# `import torch` initialises neither CUDA nor its OpenMP pools (both start at first use, and the
# supervisor only imports), so the forked worker makes its own CUDA context. CUDA must never be
# touched in the supervisor: probing the device happens in the cell.
FORK_SAFE = {"onnxruntime": True, "torch": True}


def warm_worker(engine_names):
    """Whether an environment's cells run in one warm worker (supervisor.run_warm) rather than a
    process each. torch: always — on a GPU a process per cell pays CUDA's start and the program's
    load every time (an H100: 237 s for 28 cells against 28 s warm, bench/gpu_bench.py), on the CPU
    torch.compile's start (36.9 s against 11.0 s for 22 cells here). TensorRT: on a GPU, where a cell
    is otherwise a new interpreter (fork_safe); its warm worker has run TensorRT-RTX builds on an
    H100 (which it refuses to run engines on), full TensorRT has not run warm. The engine's reset()
    puts back what a cell changes."""
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES") not in (None, "")
    return set(engine_names) == {"torch"} or (gpu and set(engine_names) == {"tensorrt"})


def fork_safe(engine_name):
    if engine_name == "tensorrt":
        no_gpu = os.environ.get("CUDA_VISIBLE_DEVICES") == ""
        return no_gpu and os.environ.get("POLYGRAPHY_USE_TENSORRT_RTX", "0") != "0"
    return FORK_SAFE.get(engine_name, False)


# Profile settings that only some engines have (setting: (its values that need it, those engines)):
# elsewhere the cell is skipped, saying so, rather than run as something it is not.
ENGINE_ONLY = {"precision": (("tf32", "bf16"), {"torch"}),
               "sdpa_backend": (("flash", "efficient", "cudnn", "math"), {"torch"}),
               "compile": ((True,), {"torch"}),
               "optimization": (("off",), {"onnxruntime", "tensorrt"}),
               "typing": (("weak", "strong"), {"tensorrt"})}


class Unsupported(Exception):
    """The engine cannot run this profile on this model: the cell is 'skipped', with this reason."""


class Refused(Exception):
    """The engine refuses the model itself (TensorRT's ONNX parser: an operator, attribute or type
    it does not support), in its own words: the cell is 'unsupported', not an error."""


def timed_runs(infer, to_arrays):
    """Every inference's outputs as {name: array} (warm-up first: the host judges the worst of
    them and reports drift) and the milliseconds of each timed one (their median is the cell's
    latency, their spread what a change between versions must exceed). `infer()` returns once
    its outputs are ready; `to_arrays` (a copy to the host, say) runs outside the timing."""
    runs, times = [], []
    for index in range(WARMUP + REPEATS):
        start = time.perf_counter()
        outputs = infer()
        if index >= WARMUP:
            times.append((time.perf_counter() - start) * 1000)
        runs.append(to_arrays(outputs))
    return runs, times


def check_profile(engine_name, profile):
    settings = ["{} = {}".format(k, json.dumps(profile.get(k))) for k, (values, engines) in sorted(ENGINE_ONLY.items())
                if profile.get(k) in values and engine_name not in engines]
    if engine_name == "torch" and profile.get("keep_fp32"):
        settings.append("keep_fp32 (ONNX node names and types)")
    if settings:
        raise Unsupported("the {} engine has no {}".format(engine_name, ", ".join(settings)))


def load_engine(name):
    if name not in MODULES:
        raise ValueError("unknown engine {!r}; known: {}".format(name, ", ".join(sorted(MODULES))))
    return importlib.import_module("." + MODULES[name], __name__)
