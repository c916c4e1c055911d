"""Find case definitions by path: the `*.py` files under the cases folder, read without importing
them to learn which `@case` each declares, and imported (each on its own) only when the matrix
uses one of their cases.

A case file is the user's code run at plan time: whatever it does while being imported — raise
anything, `sys.exit()`, an argparse call, a KeyboardInterrupt, or never return — ends as one
ConfigError naming the file (exit 2), never a silent exit 0 or a hang. A file that is not Python
source (not UTF-8 and without a coding cookie, a syntax error) breaks only the matrices that need
it.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from ..case import CaseDef, Export
from ..config import ConfigError
from ..stops import Stopped, run_apart
from ..store.hashing import hash_json

IMPORT_TIMEOUT_S = 120  # importing torch and transformers takes seconds; a case file never needs minutes
STOP_GRACE_S = 5


class _ImportTimeout(BaseException):
    """Raised into a case file that is still importing at its deadline."""


def local_modules(source: Path) -> list[Path]:
    """The files of the modules a case file imports from its own folder (`from _model import Net`,
    at any depth of those modules' own imports): its model's code as much as the file itself, so
    they are part of its artifacts' key. A module imported from elsewhere (an installed package)
    is not: its version is the environment's."""
    folder, found, todo = source.parent, [], [source]
    while todo:
        try:
            tree = ast.parse(todo.pop().read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue  # the import says what is wrong with it
        names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        for top in {name.split(".")[0] for name in names}:
            package = folder / top
            files = [folder / f"{top}.py"] if (folder / f"{top}.py").is_file() else \
                sorted(package.rglob("*.py")) if (package / "__init__.py").is_file() else []
            fresh = [path for path in files if path != source and path not in found]
            found += fresh
            todo += fresh
    return sorted(found)


def case_files(cases_dir: Path) -> list[Path]:
    """The case files: regular files only (reading a FIFO named `x.py` waited forever)."""
    return [p for p in sorted(cases_dir.glob("*.py")) if not p.name.startswith("_") and p.is_file()]


def declared_cases(cases_dir: Path) -> tuple[dict[str, Path], dict[Path, tuple[str, str]]]:
    """({case name: the file declaring it}, {file: (where, why it cannot be read)}), from the source:
    no import, no torch, no model code. ast.parse takes the bytes, so a coding cookie or a BOM is
    honoured as Python itself would."""
    names, broken = {}, {}
    for path in case_files(cases_dir):
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except SyntaxError as exc:
            broken[path] = (f"line {exc.lineno}", f"SyntaxError: {exc.msg}") if exc.lineno else \
                ("", f"not Python source: {exc.msg}")
            continue
        except (ValueError, OSError) as exc:  # null bytes; unreadable, a folder named *.py
            broken[path] = ("", getattr(exc, "strerror", None) or f"not Python source: {exc}")
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                names.update({name: path for d in node.decorator_list if (name := _case_name(d, node.name))})
    return names, broken


def discover_cases(cases_dir: Path, wanted: set[str], index: Path | None = None) -> dict[str, CaseDef]:
    """The wanted cases, importing only the files that declare them. A wanted case declared
    nowhere while some file cannot be read: that file is the problem (it may hold the case).
    `index`: a folder where what each imported file declared is kept by its bytes' digest, so that
    an unchanged file is not imported again until a case of it must be built (case_index)."""
    declared, broken = declared_cases(cases_dir)
    if wanted - set(declared) and broken:
        if len(broken) == 1:
            path, (where, problem) = next(iter(broken.items()))
            raise ConfigError(path, where, problem if where else f"not a readable case file ({problem})")
        raise ConfigError(cases_dir, "", f"{sorted(wanted - set(declared))} declared by no readable case file; not "
                                         "readable: " + "; ".join(f"{p.name} ({' '.join(why).strip()})"
                                                                  for p, why in broken.items()))
    found: dict[str, CaseDef] = {}
    for path in sorted({declared[name] for name in wanted if name in declared}):
        for case in indexed_cases(path, index) if index else load_case_file(path):
            if case.name in found:
                raise ConfigError(path, case.name, f"case name also defined in {found[case.name].source}")
            found[case.name] = case
    return found


def load_case_file(path: Path) -> list[CaseDef]:
    module_name = f"trtmatrix_cases.{path.stem}"
    if str(path.resolve().parent) not in sys.path:  # `from _model import Net` beside it (issue 41, sweep 19 M9)
        sys.path.append(str(path.resolve().parent))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    printed = io.StringIO()  # what the file prints while importing: its own words if it fails
    try:
        with _deadline(IMPORT_TIMEOUT_S), contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            spec.loader.exec_module(module)
    except Stopped:  # a stop signal while importing: the user's stop, not the file's fault
        sys.modules.pop(module_name, None)
        raise
    except _ImportTimeout:
        sys.modules.pop(module_name, None)
        raise ConfigError(path, "", f"still importing after {IMPORT_TIMEOUT_S} s (a case file must not block at "
                                    "import)") from None
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt from a case file included
        sys.modules.pop(module_name, None)
        line = _line_in(path, exc)
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, SystemExit):
            what = f"exits while being imported (SystemExit({exc.code!r}))"
        said = printed.getvalue().strip().splitlines()
        raise ConfigError(path, f"line {line}" if line else "", what + (f"; it printed: {said[-1]}" if said else "")) from None
    sys.stderr.write(printed.getvalue())  # a file that imports fine keeps its output
    return [dataclasses.replace(obj, source=path)
            for obj in vars(module).values() if isinstance(obj, CaseDef)]


class _Deferred:
    """A case's build function, imported from its file when first called: a plan whose artifacts
    are all prepared never imports its case files (torch and transformers take seconds, five
    on a GPU host that writes no bytecode, paid by every nightly command before its first cell)."""

    def __init__(self, path: Path, name: str):
        self.path, self.name = path, name

    loaded: dict[Path, list[CaseDef]] = {}  # a file imported once per process, however many cases it builds

    def imported(self) -> None:
        """The file imported, its case not built yet (what the build then changes in it is seen)."""
        if self.path not in self.loaded:
            self.loaded[self.path] = load_case_file(self.path)

    def __call__(self, **kwargs):
        self.imported()
        case = next((c for c in self.loaded[self.path] if c.name == self.name), None)
        if case is None:
            raise ConfigError(self.path, self.name, "no longer defines this case")
        return case.build(**kwargs)


def indexed_cases(path: Path, index: Path) -> list[CaseDef]:
    """The file's cases from the index where its bytes are unchanged since an import, each with a
    build that imports it when called; else imported now in a child process (import_apart), and
    what it declares indexed. This process never imports a case file to plan: what a file does at
    import (ignore SIGTERM, turn warnings into errors) stays in the child."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    entry = index / f"{digest[:24]}.json"
    try:
        kept = json.loads(entry.read_text())
        if kept["seal"] != hash_json([digest, kept["declared"]]):  # edited since: its rows are not the file's
            raise ValueError("not the index trtmatrix wrote")  # (issue 41, sweep 16 J25: 16 of 24 rows gone)
        return _deferred(path, kept["declared"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # not indexed yet, or an index of another shape
        declared = import_apart(path)
    cases = _deferred(path, declared)
    try:
        index.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"declared": declared, "seal": hash_json([digest, declared])}))
        tmp.replace(entry)
    except OSError:  # a read-only cache: imported next time
        pass
    return cases


def _deferred(path: Path, declared: list[dict]) -> list[CaseDef]:
    return [CaseDef(name=c["name"], build=_Deferred(path, c["name"]), params=c["params"], seed=c["seed"],
                    export=_export(c["export"]), description=c["description"], source=path) for c in declared]


def declarations(cases: list[CaseDef]) -> list[dict]:
    """What a case file declares, as the index keeps it (JSON)."""
    return [{"name": c.name, "params": c.params, "seed": c.seed, "description": c.description,
             "export": dataclasses.asdict(c.export)} for c in cases]


def import_apart(path: Path) -> list[dict]:
    """The declarations of a case file imported in a child process (`python -m
    matrix.sources.case_import`), with the deadline and the errors of load_case_file: a ConfigError
    as its import would raise it here; a stop here ends the child."""
    ended = run_apart("matrix.sources.case_import", [str(path), json.dumps(sys.argv)], IMPORT_TIMEOUT_S + STOP_GRACE_S)
    if ended.returncode is None:  # it ignored its own deadline (SIGALRM)
        raise ConfigError(path, "", f"still importing after {IMPORT_TIMEOUT_S} s (a case file must not block at import)")
    sys.stderr.write(ended.err)  # what the file printed while importing, where it imported fine
    said = json.loads(ended.out.strip().splitlines()[-1]) if ended.out.strip() else None
    if ended.returncode == 0 and isinstance(said, list):
        return said
    if isinstance(said, dict) and "message" in said:
        raise ConfigError(path, said["key"], said["message"])
    died = f"killed by {signal.Signals(-ended.returncode).name}" if ended.returncode < 0 else f"exit {ended.returncode}"
    raise ConfigError(path, "", f"the process importing it ended ({died}) without a word")


def _export(stored: dict) -> Export:
    """An Export as the case file made it (JSON keeps neither tuples nor integer axes): equal to
    it, so artifact keys are the same whether the file was imported or indexed."""
    axes = stored["dynamic_axes"]
    return Export(**{**stored, "output_names": tuple(stored["output_names"]),
                     "dynamic_axes": None if axes is None else {name: {int(axis): dim for axis, dim in dims.items()}
                                                               for name, dims in axes.items()}})


class _deadline:
    """SIGALRM after `seconds` in the main thread (elsewhere, no deadline: signals go there)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.armed = threading.current_thread() is threading.main_thread()

    def __enter__(self):
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)

    @staticmethod
    def _expired(signum, frame):
        raise _ImportTimeout()


def _line_in(path: Path, exc: BaseException) -> int | None:
    """The case file's own line that failed, not a line of Python's import machinery or a library."""
    if isinstance(exc, SyntaxError) and exc.filename and Path(exc.filename).resolve() == path.resolve():
        return exc.lineno
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if Path(frame.filename).resolve() == path.resolve()]
    return lines[-1] if lines else None


def _case_name(decorator: ast.expr, function: str) -> str | None:
    call = decorator if isinstance(decorator, ast.Call) else None
    target = call.func if call else decorator
    if not ((isinstance(target, ast.Name) and target.id == "case") or
            (isinstance(target, ast.Attribute) and target.attr == "case")):
        return None
    given = [k.value for k in call.keywords if k.arg == "name"] + call.args[:1] if call else []
    return given[0].value if given and isinstance(given[0], ast.Constant) else function
