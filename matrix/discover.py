"""Find case definitions by path: every `*.py` under the cases folder is imported on its own."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import traceback
from pathlib import Path

from .case import CaseDef
from .config import ConfigError


def load_case_file(path: Path) -> list[CaseDef]:
    module_name = f"trtmatrix_cases.{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        raise ConfigError(path, f"line {last.lineno}", f"{type(exc).__name__}: {exc}") from None
    return [dataclasses.replace(obj, source=path)
            for obj in vars(module).values() if isinstance(obj, CaseDef)]


def discover_cases(cases_dir: Path) -> dict[str, CaseDef]:
    found: dict[str, CaseDef] = {}
    for path in sorted(cases_dir.glob("*.py")):
        if path.name.startswith("_"):
            continue
        for case in load_case_file(path):
            if case.name in found:
                raise ConfigError(path, case.name, f"case name also defined in {found[case.name].source}")
            found[case.name] = case
    return found
