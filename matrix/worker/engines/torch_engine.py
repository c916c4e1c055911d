"""PyTorch running the case's own module (not its ONNX export), on the CPU or a CUDA GPU, as its
users run it: the module moved to the device and cast to the dtype, called under no_grad.

On a GPU, PyTorch's kernels are what TensorRT's outputs are usually held against, and seeds 000
and 003 are about exactly these kernels (fused FP16 attention, SDPA). The host pickles the module
at prepare time (module.pt, prepare/torch_module.py); the classes a case file defines are imported
here from that file, by path, before unpickling. That is the one thing a torch cell imports of the
case; it needs the interpreter that prepared it (host environments) and the same torch: another
version is an `error` cell that says so. Not a torch.export program: one traced on the CPU fixes
the CPU's strides and code paths, and failed on CUDA where the module runs (issue 43).

Profile mapping: precision fp32 (TF32 off), tf32 (TF32 matmuls and convolutions, CUDA only),
fp16 and bf16 (the module cast to that dtype, floating inputs cast); sdpa_backend: the only kernel
torch.nn.attention.sdpa_kernel allows (flash, efficient and cudnn are CUDA kernels; a kernel
that cannot take the inputs is `skipped` with PyTorch's reason); compile: torch.compile
(inductor), compiled during the warm-up inference. The device: CUDA when the environment leased
a GPU (the backend makes only that one visible), else the CPU.

On a GPU the cells run in one warm worker (supervisor.run_warm): CUDA starts once, each module
is loaded (and moved to the GPU) once per worker and dtype while its artifact's cells run, and
reset() puts back, after every cell, what a cell changes: the TF32 flags and torch.compile's
state (SDPA kernel choices are a context around each inference). Each cell's log starts with the
state it found ("torch state at start"), the same for every cell of a worker. Outputs stay on the
device until an inference gives bits no earlier one of the cell gave: only those are copied to
the host (usually the first alone), so a cell of 88 inferences is not 88 copies and comparisons.
"""

import contextlib
import importlib.util
import json
import os
import sys
import time
import types

import torch

from . import Refused, Unsupported, timed_runs
from ..files import CASES_PACKAGE, PROGRAM_META
from ..module_outputs import flat_outputs

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
CUDA_ONLY_SDPA = ("flash", "efficient", "cudnn")
STATE_COPY_BYTES = 256 << 20
ENVIRON = "os.environ"  # prepare/torch_module.py's name for the build's environment variables
# What reset() puts back: PyTorch's own defaults, as this process found them.
TF32_DEFAULTS = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
_modules = {}  # (module file, its mtime, device, dtype) -> module: one artifact's, loaded once per worker
_compiled = []  # torch.compile used since the last reset()
_kept = []  # this cell's distinct outputs so far: (the outputs on the device, their arrays on the host)
_args = {}  # this cell's inputs on the device: put there once, for all its builds
# Bit patterns: two outputs are the same when their bits are (a NaN equals itself, -0.0 is not 0.0).
_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


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
    del _kept[:]
    _args.clear()
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


def _meta(folder):
    meta_path = os.path.join(folder, PROGRAM_META)
    if not os.path.exists(meta_path):
        raise Unsupported("no PyTorch module to run: the torch engine runs a case's PyTorch module "
                          "(an ONNX-file or suite case has none)")
    with open(meta_path) as fh:
        meta = json.load(fh)
    if meta["torch"] != torch.__version__:
        raise RuntimeError("the module was made by torch {} and this environment has torch {}: the torch engine "
                           "runs the module with the torch that prepared it (prepare where the cells run)".format(
                               meta["torch"], torch.__version__))
    if "module" in meta["errors"] or "module" not in meta:
        raise RuntimeError("the case's module could not be saved for the torch engine at prepare time: {}".format(
            meta["errors"].get("module", "made by a trtmatrix that saved no module (prepare again)")))
    return meta


def _import_case_files(files):
    """The case files (and the modules beside them) whose classes the pickle names, imported by
    path under the names they had; their folder on sys.path, as the case file put it there for
    what they import themselves."""
    package = sys.modules.setdefault(CASES_PACKAGE, types.ModuleType(CASES_PACKAGE))
    package.__path__ = getattr(package, "__path__", [])
    for name, path in files.items():
        folder = os.path.dirname(path)
        if folder not in sys.path:  # what they import from beside them (`from _model import Net`)
            sys.path.append(folder)
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise


def _module(spec, precision, place, log):
    """The case's module on `place` in `dtype`, as `module.to(place, dtype)` makes it: loaded once
    per worker while its artifact's cells run (the next artifact's replace it: memory stays one
    model's), kept under the file's mtime (a file prepared again is loaded again)."""
    folder = os.path.dirname(spec["inputs"])
    meta = _meta(folder)
    path = os.path.join(folder, meta["module"]["file"])
    dtype, name = DTYPES[precision], {"tf32": "fp32"}.get(precision, precision)
    key = (path, os.path.getmtime(path), place, dtype)
    if key in _modules:
        log("the {} module was loaded onto {} by an earlier cell of this worker".format(name, place))
        return _modules[key], meta
    for old in [k for k in _modules if k[0] != path]:
        del _modules[old]
    _import_case_files(meta["module"]["case_files"])
    if meta["module"].get("state"):  # what the case's build set in its file, which a fresh import lacks
        state = torch.load(os.path.join(folder, meta["module"]["state"]), map_location=place, weights_only=False)
        os.environ.update(state.pop(ENVIRON, {}))
        for name, values in state.items():
            for key, value in values.items():
                owner, _, attribute = key.rpartition(".")
                setattr(getattr(sys.modules[name], owner) if owner else sys.modules[name], attribute, value)
    module = torch.load(path, map_location=place, weights_only=False)
    # FP32 runs the module as prepared (float32, and any float64 tensor the user made so); FP16 and
    # BF16 as `module.to(dtype)` makes it, float64 tensors too, as `module.half()` does
    _modules[key] = (module.to(device=place) if dtype == torch.float32 else module.to(device=place, dtype=dtype)).eval()
    log("loaded the {} module onto {}".format(name, place))
    return _modules[key], meta


def load_module(inputs, precision, place):
    """(the module of the artifact whose inputs file is `inputs`, in `precision` on `place`; what
    PROGRAM_META says of it), as a torch cell loads it: what repro traces a program of."""
    return _module({"inputs": inputs}, precision, place, lambda line: None)


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


def _same_bits(one, two):
    if one.shape != two.shape or one.dtype != two.dtype or one.device != two.device:
        return False
    if one.is_floating_point() or one.is_complex():
        one, two = one.view(_BITS[one.element_size()]), two.view(_BITS[two.element_size()])
    return torch.equal(one, two)


def _to_arrays(names, outputs):
    """An inference's outputs on the host; the very arrays of an earlier inference of this cell
    whose outputs had the same bits (compared on the device, no copy): the worker writes and the
    host judges each distinct result once (cell.save_runs tells them apart by identity first)."""
    for device_outputs, arrays in _kept:
        if len(device_outputs) == len(outputs) and all(_same_bits(a, b) for a, b in zip(device_outputs, outputs)):
            return arrays
    arrays = {name: _numpy(value) for name, value in zip(names, outputs)}
    _kept.append((tuple(value.detach() for value in outputs), arrays))
    return arrays


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
    if spec.get("build_index", 0) == 0:
        del _kept[:]
        _args.clear()
    # cuda:0, not cuda (torch.compile refused "cuda" against tensors on "cuda:0" in exported
    # programs' device assertions); the backend makes the leased GPU the only one visible.
    place = "cuda:0" if on_cuda else "cpu"
    # PyTorch lets cuDNN use TF32 by default: FP32 means FP32 here, unless the profile asks for TF32.
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = profile["precision"] == "tf32"
    start = time.perf_counter()
    module, meta = _module(spec, profile["precision"], place, log)
    if profile.get("compile"):
        _compiled.append(True)
        module = torch.compile(module)
    if not _args:
        args = [torch.from_numpy(inputs[name]).to(place) for name in meta["inputs"]]
        _args["args"] = [a.to(dtype) if a.is_floating_point() else a for a in args]
    args = _args["args"]
    if on_cuda:
        torch.cuda.synchronize()
    build_s = time.perf_counter() - start
    log("torch {} on {} ({}), {}{}{}".format(torch.__version__, place, device().get("gpu") or "CPU", profile["precision"],
                                              ", SDPA " + sdpa if sdpa else "",
                                              ", torch.compile" if profile.get("compile") else ""))

    # Each inference gets its own copy of the inputs, made outside its timing: a module that changes
    # its input in place (`x.mul_(2)`, `nn.ReLU(inplace=True)` first) is run as a user calls it, once
    # per input (issue 41, sweep 18 L1: the 11th inference saw x doubled ten times).
    fresh = [[a.clone() for a in args]]
    # and the module's buffers and parameters as they were: a module that counts its calls in a buffer
    # (or adds to a parameter under no_grad) is judged as its first call each time, not as its eleventh
    # (sweep 18 L21: its drift was called unwritten memory; sweep 19 M8)
    # (the parameters where they are small enough to hold twice: STATE_COPY_BYTES)
    params = list(module.parameters())
    small = sum(p.numel() * p.element_size() for p in params) <= STATE_COPY_BYTES
    buffers = [(b, b.detach().clone()) for b in [*module.buffers(), *(params if small else [])]]

    def infer():
        try:
            with torch.no_grad(), _sdpa_kernel(sdpa) if sdpa else contextlib.nullcontext():
                outputs = module(*fresh.pop())
        except NotImplementedError as exc:
            if "not implemented for" in str(exc):  # `"lu_cpu" not implemented for 'Half'`: no kernel in this type
                raise Refused("PyTorch has no kernel for it in {} on {}: {}".format(
                    profile["precision"], place, str(exc).strip().splitlines()[0]))
            raise
        except RuntimeError as exc:
            if "No available kernel" in str(exc):  # the SDPA kernel asked for cannot take these inputs
                raise Unsupported("the {} SDPA kernel cannot run this attention in {}: {}".format(
                    sdpa, profile["precision"], str(exc).strip().splitlines()[0]))
            raise
        if on_cuda:
            torch.cuda.synchronize()
        return flat_outputs(outputs)

    def kept(outputs):
        fresh.append([a.clone() for a in args])
        with torch.no_grad():
            for buffer, first in buffers:
                buffer.copy_(first)
        if on_cuda:
            torch.cuda.synchronize()
        return _to_arrays(meta["outputs"], outputs)

    runs, times = timed_runs(infer, kept)
    # In FP16 or BF16, what `module.to(dtype)` and the inputs made reduced: none, and nothing was (sweep 18 L3)
    reduced = {"reduced_values": sum(1 for t in [*module.parameters(), *module.buffers(), *args] if t.is_floating_point())}
    return {"runs": runs, "build_s": build_s, "infer_times_ms": times,
            "info": reduced if profile["precision"] in ("fp16", "bf16") else {}}
