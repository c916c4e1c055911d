"""Find case definitions by path: every `*.py` under the cases folder is imported on its own."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
import traceback
from pathlib import Path

from ..case import CaseDef
from ..config import ConfigError


def load_case_file(path: Path) -> list[CaseDef]:
    module_name = f"trtmatrix_cases.{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        line = _line_in(path, exc)
        raise ConfigError(path, f"line {line}" if line else "", f"{type(exc).__name__}: {exc}") from None
    return [dataclasses.replace(obj, source=path)
            for obj in vars(module).values() if isinstance(obj, CaseDef)]


def _line_in(path: Path, exc: Exception) -> int | None:
    """The case file's own line that failed, not a line of Python's import machinery or a library."""
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == path.resolve():
        return exc.lineno
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if Path(frame.filename).resolve() == path.resolve()]
    return lines[-1] if lines else None


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


def declared_case_names(cases_dir: Path) -> set[str]:
    """The names of the `@case` functions in the case files, read from their source without
    importing them (no torch, no model code): enough to check a name, cheap for every plan."""
    names = set()
    for path in sorted(cases_dir.glob("*.py")):
        if path.name.startswith("_"):
            continue
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue  # discovery reports it, at its line, when a matrix uses the file
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                names.update(_case_name(d, node.name) for d in node.decorator_list if _case_name(d, node.name))
    return names


def _case_name(decorator: ast.expr, function: str) -> str | None:
    call = decorator if isinstance(decorator, ast.Call) else None
    target = call.func if call else decorator
    if not ((isinstance(target, ast.Name) and target.id == "case") or
            (isinstance(target, ast.Attribute) and target.attr == "case")):
        return None
    given = [k.value for k in call.keywords if k.arg == "name"] + call.args[:1] if call else []
    return given[0].value if given and isinstance(given[0], ast.Constant) else function
