"""Where cases come from: Python case files (`cases/*.py`, discovered by path), a user's ONNX file
with inputs (and expected outputs), and the known-issue registry beside the case files. Each
becomes a CaseSpec; nothing downstream needs to know which kind it was.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..case import CaseDef
from ..config import NAME_PATTERN, CaseEntry, ConfigError, MatrixConfig, input_set_name, param_values_problem
from ..store.cache import cache_folder, case_index
from .case_files import declared_cases, discover_cases
from .known_issues import REGISTRY, KnownIssue, value_kind
from .onnx_files import check_onnx_case
from .onnx_suites import SuiteTest, suite_tests

Params = tuple[tuple[str, Any], ...]
INPUT_SET = "inputs"  # the parameter that names a row of an ONNX-file case of several input files


@dataclass(frozen=True)
class CaseSpec:
    """A case as the matrix uses it: a torch case from cases/ or an ONNX file from the config."""

    name: str
    entry: CaseEntry
    root: Path
    torch_case: CaseDef | None = None
    suite: dict[str, SuiteTest] | None = None  # {test name: test} of an external suite
    left_out: tuple[tuple[str, str], ...] = ()  # the suite's tests include/exclude pick that are not rows: (name, why)

    @property
    def is_onnx_file(self) -> bool:
        return self.torch_case is None and self.suite is None

    def suite_test(self, params: Params) -> SuiteTest:
        return self.suite[dict(params)["test"]]

    @property
    def input_sets(self) -> dict[str, dict[str, Path]] | None:
        """An ONNX-file case of several input files: {row name (the file's stem): {"inputs",
        "expected"}}; None for one file (its row has no parameter, as before input sets)."""
        entry = self.entry
        if not isinstance(entry.inputs, tuple):
            return None
        expected = entry.expected or (None,) * len(entry.inputs)
        return {input_set_name(inputs): {k: _resolved(self.root / v) for k, v in
                                         (("inputs", inputs), ("expected", given)) if v}
                for inputs, given in zip(entry.inputs, expected)}

    def onnx_paths(self, params: Params = ()) -> dict[str, Path]:
        """The model and, for the row of `params`, its inputs and expected outputs (if given)."""
        chosen = dict(params).get(INPUT_SET)
        if chosen is not None:
            return {"onnx": _resolved(self.root / self.entry.onnx), **self.input_sets[chosen]}
        named = {"onnx": self.entry.onnx, "inputs": self.entry.inputs, "expected": self.entry.expected}
        return {k: _resolved(self.root / v) for k, v in named.items() if v}

    def all_onnx_paths(self) -> list[dict[str, Path]]:
        return [self.onnx_paths(params) for params in self.param_grid()]

    def param_grid(self) -> list[Params]:
        if self.suite is not None:
            return [(("test", name),) for name in self.suite]
        if self.input_sets is not None:
            return [((INPUT_SET, name),) for name in self.input_sets]
        axes = dict(self.torch_case.params) if self.torch_case else {}
        axes.update(self.entry.params or {})
        names = sorted(axes)
        return [tuple(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]


def case_specs(config: MatrixConfig, config_path: Path, engines: set[str],
               only: list[str] | None = None) -> dict[str, CaseSpec]:
    """The cases of the matrix file (`only`: those of them; a case file is imported only for a case
    that is used: the BGE reranker's imports transformers, seconds on a GPU host). `engines`: those
    of the matrix's environments, which decide the suite tests that are rows."""
    root = config_path.parent
    cache = cache_folder(root, config.run.cache_dir)
    chosen = {name: entry for name, entry in config.cases.items() if not only or name in only}
    wanted = {name for name, entry in chosen.items() if not (entry.onnx or entry.is_suite)}
    found = discover_cases(root / config.run.cases_dir, wanted, case_index(cache)) if wanted else {}
    specs = {}
    for name, entry in chosen.items():
        if entry.is_suite:
            tests, left_out = _suite(name, entry, cache, config_path, engines)
            spec = CaseSpec(name, entry, root, suite=tests, left_out=left_out)
        elif entry.onnx:
            spec = CaseSpec(name, entry, root)
            for paths in spec.all_onnx_paths():
                for key, path in paths.items():
                    if not path.is_file():
                        raise ConfigError(config_path, f"cases.{name}.{key}", f"{_not_a_file(path)}: {path}")
            _check_rules(config_path, name, entry, check_onnx_case(spec.all_onnx_paths(), entry.mask))
        elif name in found:
            spec = CaseSpec(name, entry, root, found[name])
            _check_params(found[name])
            unknown = set(entry.params or {}) - set(found[name].params)
            if unknown:
                raise ConfigError(config_path, f"cases.{name}.params",
                                  f"{sorted(unknown)} are not parameters of the case in {found[name].source}")
        else:
            raise ConfigError(config_path, f"cases.{name}",
                              f"no case named {name!r} in {root / config.run.cases_dir} and no 'onnx' file given")
        specs[name] = spec
    return specs


def _suite(name: str, entry: CaseEntry, cache_dir: Path, config_path: Path,
           engines: set[str]) -> tuple[dict[str, SuiteTest], tuple[tuple[str, str], ...]]:
    folder = (config_path.parent / entry.suite_dir).resolve() if entry.suite_dir else None
    if folder is not None and not folder.is_dir():
        raise ConfigError(config_path, f"cases.{name}.suite_dir", f"not a folder: {folder}")
    suite = suite_tests(entry.suite, folder, entry.include, entry.exclude, cache_dir, engines)
    left_out = dict(suite.left_out)
    # A test's name goes into cell ids like a parameter value: the same rule, or it is left out.
    for test in suite.tests:
        if problem := param_values_problem([test]):
            left_out[test] = f"its name cannot be part of a cell id: {problem[1]}"
    tests = {test: t for test, t in suite.tests.items() if test not in left_out}
    if not tests:
        raise ConfigError(config_path, f"cases.{name}", "the suite has no test that include/exclude keep"
                          + (f" and trtmatrix can run ({len(left_out)} left out: {next(iter(left_out.values()))}, ...)"
                             if left_out else ""))
    return tests, tuple(sorted(left_out.items()))


def _check_params(case: CaseDef) -> None:
    """A case file's own parameters end up in cell ids like the matrix file's: the same rules."""
    for name, values in case.params.items():
        if not (isinstance(name, str) and len(name) <= 80 and re.match(NAME_PATTERN, name)):
            raise ConfigError(case.source, f"{case.name}.params", f"{name!r} is not a valid name")
        if problem := param_values_problem(values):
            raise ConfigError(case.source, f"{case.name}.params.{name}{problem[0]}", problem[1])


def check_known_issues(issues: tuple[KnownIssue, ...], config: MatrixConfig, config_path: Path) -> None:
    """Each entry must name a case, or a typo silently turns an expected failure into a red cell.
    The registry serves every matrix file on its case files, so a case of this matrix, or any case
    file's case beside it, will do; profiles are not checked (a matrix may run fewer)."""
    cases_dir = config_path.parent / config.run.cases_dir
    known = set(config.cases) | set(declared_cases(cases_dir)[0])
    for i, issue in enumerate(issues):
        if issue.case is not None and issue.case not in known:
            raise ConfigError(cases_dir / REGISTRY, f"issue.{i}.case", f"unknown case {issue.case!r}")


def check_known_issue_params(issues: tuple[KnownIssue, ...], specs: dict[str, CaseSpec], registry: Path) -> None:
    """A parameter the case does not have, or a value of another kind than the case's (`"2"` for
    an integer, `true` for 1) would never match: the entry would silently do nothing."""
    for i, issue in enumerate(issues):
        spec = specs.get(issue.case)
        if spec is None or not issue.params:
            continue
        axes: dict[str, list] = {}
        for params in spec.param_grid():
            for name, value in params:
                axes.setdefault(name, []).append(value)
        for name, value in issue.params.items():
            if name not in axes:
                raise ConfigError(registry, f"issue.{i}.params.{name}",
                                  f"case {issue.case!r} has no parameter {name!r} (it has {sorted(axes) or 'none'})")
            kinds = {value_kind(v) for v in axes[name]}
            if value_kind(value) not in kinds:
                raise ConfigError(registry, f"issue.{i}.params.{name}",
                                  f"{value!r} is {value_kind(value)}; case {issue.case!r} has {name} = "
                                  f"{list(dict.fromkeys(axes[name]))} ({' or '.join(sorted(kinds))}): it could never match")


def _resolved(path: Path) -> Path:
    """Symbolic links followed; a loop of them stays as written (said where the file is checked)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return path.absolute()


def _not_a_file(path: Path) -> str:
    """Why a case's file cannot be read, in the words of what it is."""
    if path.is_dir():
        return "a folder, not a file"
    if path.is_symlink() and not path.exists():
        return "a symbolic link to nothing (or a loop of links)"
    if path.exists():
        return "not a regular file (a pipe, a device or a socket)"
    return "file not found"


def _check_rules(config_path: Path, name: str, entry: CaseEntry, shapes: dict[str, list[int | str] | None]) -> None:
    """What would fail at compare time on every cell, said at plan: a rule's `axis` on an output
    without it, and a top-k rule (with no cosine) whose `topk` covers every item of every output's
    rows, so that it cannot fail (acceptance.judge_by_rule)."""
    for profile, rule in entry.accept.items():
        for output, shape in shapes.items():
            if rule.axis is not None and shape is not None and rule.axis >= len(shape):
                raise ConfigError(config_path, f"cases.{name}.accept.{profile}.axis",
                                  f"{rule.axis} is not an axis of output {output!r} (rank {len(shape)}); the rule judges "
                                  "every output of the case")
        items = {output: _row_items(shape, rule.axis) for output, shape in shapes.items()}
        if rule.top1 is not None and rule.cosine is None and all(n is not None and n <= rule.topk for n in items.values()):
            output, most = next(iter(items.items()))
            raise ConfigError(config_path, f"cases.{name}.accept.{profile}.topk",
                              f"{rule.topk} covers every item of output {output!r} (shape {shapes[output]}: {most} per "
                              "row): the rule cannot fail; give a smaller topk, or a cosine")


def _row_items(shape: list[int | str] | None, axis: int | None) -> int | None:
    """How many items each row top-k ranks holds (acceptance._rows, or a slice along `axis`), where
    the declared shape fixes it; None where a dimension it depends on is not fixed."""
    if shape is None:
        return None
    if axis is not None:
        dims = [size for index, size in enumerate(shape) if index != axis]
    else:
        dims = shape if not shape or shape[-1] == 1 else shape[-1:]
    return math.prod(dims) if all(isinstance(size, int) for size in dims) else None
