"""The case's PyTorch module for the torch engine, saved as it is: pickled with its weights, so that
a torch cell runs what a user runs, the module itself on the cell's device and in its dtype (issue 43);
and, for repro, torch.export's program of it, traced when asked for.

A program made by torch.export on the CPU is the CPU's program: tracing fixes strides and code paths
(`.contiguous().view(...)` on a tensor that was contiguous on the CPU is traced as a bare view), so
nn.MultiheadAttention's block, moved to CUDA, failed at batch 2 with "view size is not compatible"
where the module itself runs. The pickle names the module's classes; those a case file defines live
in load_case_file's `trtmatrix_cases.<file>` modules, which only exist where that file was imported:
their files are kept beside it, and the torch engine imports them by path before unpickling (the
environment is the interpreter that prepared it: host environments, the same torch).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
from pathlib import Path
from types import FunctionType, ModuleType

from ..worker.files import CASES_PACKAGE, INPUTS, MODULE, MODULE_STATE, PROGRAM


def case_files(module, folder: Path) -> dict[str, str]:
    """{module name: file} of every class of the module's layers that a case file defines, or a
    module in the case file's `folder` defines (`from _model import Net`: importable only where
    the case file put its folder on sys.path)."""
    names = {cls.__module__ for layer in module.modules() for cls in type(layer).__mro__}
    files = {name: getattr(sys.modules.get(name), "__file__", None) for name in sorted(names)}
    return {name: file for name, file in files.items()
            if file and (name.startswith(CASES_PACKAGE + ".") or folder.resolve() in Path(file).resolve().parents)}


def _fingerprint(value) -> str:
    try:
        return hashlib.sha256(pickle.dumps(value, protocol=4)).hexdigest()
    except Exception:  # noqa: BLE001 - what pickle cannot take, its repr stands for
        return repr(value)


def _state(module: ModuleType) -> dict[str, object]:
    """{name or 'Class.attribute': value} of what a module holds at its top level, its own classes'
    attributes too, but functions, classes and modules themselves."""
    state = {}
    for name, value in vars(module).items():
        if name.startswith("__") or isinstance(value, (ModuleType, FunctionType)):
            continue
        if isinstance(value, type):
            if value.__module__ == module.__name__:
                state.update({f"{name}.{attr}": held for attr, held in vars(value).items()
                              if not attr.startswith("__") and not callable(held)
                              and not isinstance(held, (staticmethod, classmethod, property))})
        else:
            state[name] = value
    return state


# The process's environment variables, beside the modules' state (a build that sets one its module reads).
ENVIRON = "os.environ"


def module_state(names: list[str]) -> dict[str, dict[str, str]]:
    """{module: {name: fingerprint}} of the case file's modules, and the environment variables, before
    its build."""
    return {ENVIRON: dict(os.environ), **{name: {key: _fingerprint(value) for key, value in _state(sys.modules[name]).items()}
                                         for name in names if name in sys.modules}}


def changed_state(before: dict[str, dict[str, str]]) -> dict[str, dict[str, object]]:
    """What the build changed at the top level of the case file's modules (a config global, a
    class attribute) and in the environment variables: the torch engine imports the modules afresh
    in a process of its own, and sets these before it unpickles the module, which reads them (issue
    41, sweep 18 L7; sweep 19 M7: `os.environ["SCALE"] = "5"`)."""
    changed = {ENVIRON: {key: value for key, value in os.environ.items() if before[ENVIRON].get(key) != value}}
    for name, was in before.items():
        if name != ENVIRON:
            now = _state(sys.modules[name])
            changed[name] = {key: value for key, value in now.items() if was.get(key) != _fingerprint(value)}
    return {name: values for name, values in changed.items() if values}


def save_module(module, out: Path, meta: dict, folder: Path, state: dict | None = None) -> None:
    """module.pt and, in `meta` (program.json), where its case files are; a module that cannot be
    pickled (a lambda as an attribute, say) is no failure of the case: its torch cells say why."""
    import torch

    package = sys.modules.setdefault(CASES_PACKAGE, ModuleType(CASES_PACKAGE))  # pickle imports a class's module
    package.__path__ = getattr(package, "__path__", [])  # by name, and its package with it
    try:
        torch.save(module, str(out / MODULE))
        meta["module"] = {"file": MODULE, "case_files": case_files(module, folder)}
        if state:  # the worker imports these modules too, to set what changed in them
            meta["module"]["case_files"].update({name: sys.modules[name].__file__ for name in state if name != ENVIRON})
            try:
                torch.save(state, str(out / MODULE_STATE))
            except Exception as exc:  # noqa: BLE001 - the module alone would run without what its build set
                changed = ", ".join(key for values in state.values() for key in values)
                raise ValueError(f"its build changed {changed} in the case file, which the torch engine, importing the "
                                 f"file afresh, cannot be given ({type(exc).__name__}: {exc})") from None
            meta["module"]["state"] = MODULE_STATE
    except Exception as exc:  # noqa: BLE001 - recorded for the torch engine's cells
        # its words whole, on one line: PyTorch's "… only supported through state_dict(). See:" ends in a link
        meta["errors"]["module"] = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400]


def export_program(artifacts: Path, precision: str) -> Path:
    """torch.export's program of an artifact's module in `precision` (fp32, fp16, bf16), as the torch
    engine loads and casts it, traced on the stored inputs and kept beside it: repro's program.pt2,
    which only the same torch version loads. ValueError, in one line, where torch.export refuses it."""
    import numpy as np
    import torch

    from ..worker.engines.torch_engine import DTYPES, load_module

    target = artifacts / PROGRAM.format(precision)
    if target.is_file():
        return target
    module, meta = load_module(str(artifacts / INPUTS), precision, "cpu")
    with np.load(artifacts / INPUTS) as data:
        args = [torch.from_numpy(data[name]) for name in meta["inputs"]]
    args = tuple(a.to(DTYPES[precision]) if a.is_floating_point() else a for a in args)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    try:
        torch.export.save(torch.export.export(module, args), str(tmp))
    except Exception as exc:  # noqa: BLE001 - torch.export's own words
        tmp.unlink(missing_ok=True)
        raise ValueError(f"torch.export cannot trace the module in {precision} ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:300]}): a torch cell runs the module itself, which repro "
                         "cannot ship as a program") from None
    tmp.replace(target)
    return target
