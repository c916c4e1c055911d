"""PyTorch running the case's own module (not its ONNX export), on the CPU or a CUDA GPU.

On a GPU, PyTorch's kernels are what TensorRT's outputs are usually held against, and seeds 000
and 003 are about exactly these kernels (fused FP16 attention, SDPA). The worker never imports a
case file (case files import the orchestrator): the host hands it the module as torch.export
made it at prepare time (program-<dtype>.pt2), which only the same torch version can load;
another version is an `error` cell that says so.

Profile mapping: precision fp32 (TF32 off), tf32 (TF32 matmuls and convolutions, CUDA only),
fp16 and bf16 (the module traced in that dtype, floating inputs cast); sdpa_backend: the only kernel
torch.nn.attention.sdpa_kernel allows (flash, efficient and cudnn are CUDA kernels; a kernel
that cannot take the inputs is `skipped` with PyTorch's reason); compile: torch.compile
(inductor), compiled during the warm-up inference. The device: CUDA when the environment leased
a GPU (the backend makes only that one visible), else the CPU.

On a GPU the cells run in one warm worker (supervisor.run_warm): CUDA starts once, each program
is loaded (and moved to the GPU) once per worker, and reset() puts back, after every cell, what a
cell changes: the TF32 flags and torch.compile's state (SDPA kernel choices are a context around
each inference). Each cell's log starts with the state it found ("torch state at start"), the
same for every cell of a worker.
"""

import contextlib
import json
import os
import time

import torch

from . import Unsupported, timed_runs
from ..files import PROGRAM, PROGRAM_META

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TRACED = {"fp32": "fp32", "tf32": "fp32", "fp16": "fp16", "bf16": "bf16"}  # which program a precision runs
CUDA_ONLY_SDPA = ("flash", "efficient", "cudnn")
# What reset() puts back: PyTorch's own defaults, as this process found them.
TF32_DEFAULTS = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
_programs = {}  # (program file, its mtime, device) -> (module, meta): loaded once per worker
_compiled = []  # torch.compile used since the last reset()


def state():
    """What a cell may change of the process, as the next cell would find it."""
    from torch._dynamo import convert_frame

    return {"tf32": [torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32],
            "dynamo_frames": convert_frame.FRAME_COUNTER, "grad": torch.is_grad_enabled(),
            "default_dtype": str(torch.get_default_dtype())}


def reset():
    """After a cell in a warm worker: PyTorch's flags and torch.compile's caches as they were.
    False when CUDA is left unusable (a sticky error: an illegal access poisons the context): the
    worker must end, and a fresh one takes the next cell."""
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = TF32_DEFAULTS
    if _compiled:
        torch._dynamo.reset()
        _compiled.clear()
    if torch.cuda.is_initialized():
        try:
            torch.cuda.synchronize()
        except RuntimeError:
            return False
    return True


def version():
    return torch.__version__


def device():
    """The device cells run on, and on CUDA the facts a result depends on."""
    if not torch.cuda.is_available():
        return {"device": "cpu", "gpu": None}
    major, minor = torch.cuda.get_device_capability(0)
    return {"device": "cuda", "gpu": torch.cuda.get_device_name(0),
            "compute_capability": "{}.{}".format(major, minor), "cuda_version": torch.version.cuda,
            "cudnn_version": str(torch.backends.cudnn.version())}


def _program(spec, traced):
    folder = os.path.dirname(spec["inputs"])
    meta_path = os.path.join(folder, PROGRAM_META)
    if not os.path.exists(meta_path):
        raise Unsupported("no PyTorch module to run: the torch engine runs a case's PyTorch module "
                          "(an ONNX-file or suite case has none)")
    with open(meta_path) as fh:
        meta = json.load(fh)
    if traced in meta["errors"]:
        raise RuntimeError("torch.export could not export this module in {} at prepare time: {}".format(
            traced, meta["errors"][traced]))
    if meta["torch"] != torch.__version__:
        raise RuntimeError("program.pt2 was made by torch {} and this environment has torch {}: a serialised "
                           "program needs the same torch on both sides (prepare where the cells run)".format(
                               meta["torch"], torch.__version__))
    return torch.export.load(os.path.join(folder, PROGRAM.format(traced))), meta


def _module(spec, traced, place, log):
    """The case's module on `place`, loaded once per worker process (programs do not change: a
    changed file has another mtime)."""
    path = os.path.join(os.path.dirname(spec["inputs"]), PROGRAM.format(traced))
    key = (path, os.path.getmtime(path) if os.path.exists(path) else None, place)
    if key not in _programs:
        program, meta = _program(spec, traced)
        if place != "cpu":  # the program was traced on the CPU: its parameters and the devices written into it move
            from torch.export.passes import move_to_device_pass

            program = move_to_device_pass(program, place)
        _programs[key] = (program.module(), meta)
        log("loaded the {} program onto {}".format(traced, place))
    else:
        log("the {} program was loaded onto {} by an earlier cell of this worker".format(traced, place))
    return _programs[key]


def _sdpa_kernel(backend):
    """A fresh context per inference (sdpa_kernel is a one-shot context manager)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kernels = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel(kernels[backend])


def _numpy(value):
    """Outputs as numpy: half and bfloat16 widened to float32, which holds their values exactly."""
    value = value.detach()
    if value.is_floating_point() and value.dtype != torch.float64:
        value = value.float()
    return value.cpu().numpy()


def run(spec, inputs, log):
    log("torch state at start: " + json.dumps(state()))
    profile = spec["profile"]
    on_cuda = torch.cuda.is_available()
    sdpa = profile.get("sdpa_backend")
    if profile["precision"] == "tf32" and not on_cuda:
        raise Unsupported("TF32 is a CUDA mode (Ampere and later); this environment has no GPU")
    if sdpa in CUDA_ONLY_SDPA and not on_cuda:
        raise Unsupported("the {} SDPA kernel runs on CUDA only; this environment has no GPU".format(sdpa))
    dtype = DTYPES[profile["precision"]]
    # cuda:0, not cuda: the program's device assertions compare the names (torch.compile refused
    # "cuda" against tensors on "cuda:0"); the backend makes the leased GPU the only one visible.
    place = "cuda:0" if on_cuda else "cpu"
    # PyTorch lets cuDNN use TF32 by default: FP32 means FP32 here, unless the profile asks for TF32.
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = profile["precision"] == "tf32"
    start = time.perf_counter()
    module, meta = _module(spec, TRACED[profile["precision"]], place, log)
    if profile.get("compile"):
        _compiled.append(True)
        module = torch.compile(module)
    args = [torch.from_numpy(inputs[name]).to(place) for name in meta["inputs"]]
    args = [a.to(dtype) if a.is_floating_point() else a for a in args]
    if on_cuda:
        torch.cuda.synchronize()
    build_s = time.perf_counter() - start
    log("torch {} on {} ({}), {}{}{}".format(torch.__version__, place, device().get("gpu") or "CPU", profile["precision"],
                                              ", SDPA " + sdpa if sdpa else "",
                                              ", torch.compile" if profile.get("compile") else ""))

    def infer():
        try:
            with torch.no_grad(), _sdpa_kernel(sdpa) if sdpa else contextlib.nullcontext():
                outputs = module(*args)
        except RuntimeError as exc:
            if "No available kernel" in str(exc):  # the SDPA kernel asked for cannot take these inputs
                raise Unsupported("the {} SDPA kernel cannot run this attention in {}: {}".format(
                    sdpa, profile["precision"], str(exc).strip().splitlines()[0]))
            raise
        if on_cuda:
            torch.cuda.synchronize()
        return outputs if isinstance(outputs, (tuple, list)) else (outputs,)

    runs, times = timed_runs(infer, lambda outputs: {name: _numpy(value)
                                                     for name, value in zip(meta["outputs"], outputs)})
    return {"runs": runs, "build_s": build_s, "infer_times_ms": times, "info": {}}
