"""The plan: cases × parameters × profiles × environments, expanded into cells before anything runs.

Each cell has a readable, stable id (used in URLs and HTML anchors) and a content key: a hash of
everything that decides its result (prepared artifacts, environment definition, profile, worker
code). Equal key → a stored result can be reused.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .case import CaseDef
from .config import CaseEntry, ConfigError, MatrixConfig, Profile, load_config
from .discover import discover_cases
from .envdefs import EnvDef, load_envdefs
from .hashing import hash_files, hash_json
from .known_issues import REGISTRY, KnownIssue, load_registry
from .staging import worker_hash

Params = tuple[tuple[str, Any], ...]
EXPORT_TOOLS = ("torch", "onnx", "onnxscript", "transformers")


def _tool_versions() -> dict[str, str | None]:
    found = {}
    for name in EXPORT_TOOLS:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


# Bump when prepare() writes something new into an artifact folder (2: graph_warnings).
PREPARE_FORMAT = 2


@dataclass(frozen=True)
class CaseSpec:
    """A case as the matrix uses it: a torch case from cases/ or an ONNX file from the config."""

    name: str
    entry: CaseEntry
    root: Path
    torch_case: CaseDef | None = None

    @property
    def is_onnx_file(self) -> bool:
        return self.torch_case is None

    def onnx_paths(self) -> dict[str, Path]:
        named = {"onnx": self.entry.onnx, "inputs": self.entry.inputs, "expected": self.entry.expected}
        return {k: (self.root / v).resolve() for k, v in named.items() if v}

    def param_grid(self) -> list[Params]:
        axes = dict(self.torch_case.params) if self.torch_case else {}
        axes.update(self.entry.params or {})
        names = sorted(axes)
        return [tuple(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]

    def artifact_key(self, params: Params) -> str:
        if self.is_onnx_file:
            return hash_files(self.onnx_paths().values())
        case = self.torch_case
        return hash_json({
            "source": hash_files([case.source]),
            "name": self.name,
            "params": params,
            "options": self.entry.options,
            "seed": case.seed,
            "export": case.export,
            "tools": _tool_versions(),
            "format": PREPARE_FORMAT,
        })


@dataclass(frozen=True)
class Cell:
    case: str
    params: Params
    profile: str
    env: str
    artifact_key: str
    content_key: str

    @property
    def row_id(self) -> str:
        return "/".join([self.case, *(f"{k}={v}" for k, v in self.params), self.profile])

    @property
    def cell_id(self) -> str:
        return f"{self.row_id}/{self.env}"


@dataclass
class Plan:
    config: MatrixConfig
    config_path: Path
    cases: dict[str, CaseSpec]
    envs: dict[str, EnvDef]
    cells: list[Cell]
    known_issues: tuple[KnownIssue, ...] = ()

    @property
    def root(self) -> Path:
        return self.config_path.parent

    def path(self, setting: str) -> Path:
        return (self.root / getattr(self.config.run, setting)).resolve()

    def profile(self, name: str) -> Profile:
        return self.config.profiles[name]

    @cached_property
    def rows(self) -> list[str]:
        return list(dict.fromkeys(cell.row_id for cell in self.cells))


def _case_specs(config: MatrixConfig, config_path: Path) -> dict[str, CaseSpec]:
    root = config_path.parent
    needs_discovery = any(not entry.onnx for entry in config.cases.values())
    found = discover_cases(root / config.run.cases_dir) if needs_discovery else {}
    specs = {}
    for name, entry in config.cases.items():
        if entry.onnx:
            spec = CaseSpec(name, entry, root)
            for key, path in spec.onnx_paths().items():
                if not path.is_file():
                    raise ConfigError(config_path, f"cases.{name}.{key}", f"file not found: {path}")
        elif name in found:
            spec = CaseSpec(name, entry, root, found[name])
            unknown = set(entry.params or {}) - set(found[name].params)
            if unknown:
                raise ConfigError(config_path, f"cases.{name}.params",
                                  f"{sorted(unknown)} are not parameters of the case in {found[name].source}")
        else:
            raise ConfigError(config_path, f"cases.{name}",
                              f"no case named {name!r} in {root / config.run.cases_dir} and no 'onnx' file given")
        specs[name] = spec
    return specs


def build_plan(config_path: Path | str, only_cases: list[str] | None = None,
               only_envs: list[str] | None = None, only_cells: list[str] | None = None) -> Plan:
    config_path = Path(config_path).resolve()
    config = load_config(config_path)
    for flag, chosen, known in (("--case", only_cases, config.cases), ("--env", only_envs, config.run.environments)):
        for name in chosen or ():
            if name not in known:
                raise ConfigError(config_path, flag, f"{name!r} is not in the matrix")
    envs = {e.name: e for e in load_envdefs(config_path.parent / config.run.images_dir,
                                            config.run.environments, config_path)}
    cases = _case_specs(config, config_path)
    code = worker_hash()
    cells = []
    for name, spec in cases.items():
        if only_cases and name not in only_cases:
            continue
        for params in spec.param_grid():
            artifact_key = spec.artifact_key(params)
            for profile in spec.entry.profiles:
                for env in envs.values():
                    if only_envs and env.name not in only_envs:
                        continue
                    content_key = hash_json({
                        "artifact": artifact_key,
                        "profile": config.profiles[profile].model_dump(mode="json"),
                        "env": env.definition_hash(),
                        "worker": code,
                    })
                    cells.append(Cell(name, params, profile, env.name, artifact_key, content_key))
    if only_cells:
        unknown = set(only_cells) - {cell.cell_id for cell in cells}
        if unknown:
            raise ConfigError(config_path, "--cell", f"{sorted(unknown)[0]!r} is not a cell of the matrix")
        cells = [cell for cell in cells if cell.cell_id in only_cells]
    known_issues = load_registry(config_path.parent / config.run.cases_dir / REGISTRY)
    return Plan(config, config_path, cases, envs, cells, known_issues)
