"""The case's PyTorch module for the torch engine, saved as it is: pickled with its weights, so that
a torch cell runs what a user runs, the module itself on the cell's device and in its dtype (issue 43).

A program made by torch.export on the CPU is the CPU's program: tracing fixes strides and code paths
(`.contiguous().view(...)` on a tensor that was contiguous on the CPU is traced as a bare view), so
nn.MultiheadAttention's block, moved to CUDA, failed at batch 2 with "view size is not compatible"
where the module itself runs. The pickle names the module's classes; those a case file defines live
in load_case_file's `trtmatrix_cases.<file>` modules, which only exist where that file was imported:
their files are kept beside it, and the torch engine imports them by path before unpickling (the
environment is the interpreter that prepared it: host environments, the same torch).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

from ..worker.files import CASES_PACKAGE, MODULE


def case_files(module, folder: Path) -> dict[str, str]:
    """{module name: file} of every class of the module's layers that a case file defines, or a
    module in the case file's `folder` defines (`from _model import Net`: importable only where
    the case file put its folder on sys.path)."""
    names = {cls.__module__ for layer in module.modules() for cls in type(layer).__mro__}
    files = {name: getattr(sys.modules.get(name), "__file__", None) for name in sorted(names)}
    return {name: file for name, file in files.items()
            if file and (name.startswith(CASES_PACKAGE + ".") or folder.resolve() in Path(file).resolve().parents)}


def save_module(module, out: Path, meta: dict, folder: Path) -> None:
    """module.pt and, in `meta` (program.json), where its case files are; a module that cannot be
    pickled (a lambda as an attribute, say) is no failure of the case: its torch cells say why."""
    import torch

    package = sys.modules.setdefault(CASES_PACKAGE, ModuleType(CASES_PACKAGE))  # pickle imports a class's module
    package.__path__ = getattr(package, "__path__", [])  # by name, and its package with it
    try:
        torch.save(module, str(out / MODULE))
        meta["module"] = {"file": MODULE, "case_files": case_files(module, folder)}
    except Exception as exc:  # noqa: BLE001 - recorded for the torch engine's cells
        meta["errors"]["module"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
