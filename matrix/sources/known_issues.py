"""The known-issue registry (cases/known_issues.toml) and its effect on verdicts.

Matching is applied to a results frame, not inside a run, so `trtmatrix report` can re-apply it
(and tolerances) to stored results. A known issue never hides a measurement: the raw verdict
stays in `verdict`, the metrics stay as measured, the reported numbers go in their own column.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal

import pandas as pd
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import Field, field_validator, model_validator

from ..config import Items, KeyedError, MatrixConfig, Name, ParamValue, Strict, param_values_problem, read_toml, validate

REGISTRY = "known_issues.toml"


def registry_path(config_path: Path, config: MatrixConfig) -> Path:
    """The registry a matrix file uses: known_issues.toml beside its case files."""
    return Path(config_path).resolve().parent / config.run.cases_dir / REGISTRY


class KnownIssue(Strict):
    id: Name
    title: str
    case: Name
    profiles: Items[Name] = Field(min_length=1)
    params: dict[Name, ParamValue] = {}
    engine: Literal["onnxruntime", "tensorrt", "tensorrt-rtx"]
    versions: str
    gpu: str | None = None  # glob on the GPU name the cell ran on
    expected: Literal["fail", "error", "crash"] = "fail"
    reported: str = ""
    source: str

    @field_validator("versions")
    @classmethod
    def _specifier(cls, value: str) -> str:
        if not value.strip():  # an empty specifier matches every version: say which
            raise ValueError("empty: give the versions the issue affects (e.g. '>=10.0,<10.1')")
        try:
            SpecifierSet(value)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a version specifier: {exc}") from None
        return value

    @field_validator("params")
    @classmethod
    def _param_values(cls, params: dict) -> dict:
        """A value no row can have would never match: the entry would silently do nothing."""
        for name, value in params.items():
            if problem := param_values_problem([value]):
                raise ValueError(f"{name}: {problem[1]}")
        return params

    def matches(self, row: pd.Series) -> bool:
        if (row["case"], row["engine"]) != (self.case, self.engine) or row["profile"] not in self.profiles:
            return False
        params = json.loads(row["params"]) if isinstance(row["params"], str) else (row["params"] or {})
        if any(params.get(k) != v for k, v in self.params.items()):
            return False
        if self.gpu and not fnmatchcase(str(row.get("gpu") or ""), self.gpu):
            return False
        try:
            return Version(str(row["engine_version"])) in SpecifierSet(self.versions, prereleases=True)
        except InvalidVersion:
            return False


class Registry(Strict):
    issue: Items[KnownIssue] = ()

    @model_validator(mode="after")
    def _unique_ids(self) -> Registry:
        ids = [issue.id for issue in self.issue]
        for i, issue_id in enumerate(ids):
            if issue_id in ids[:i]:
                raise KeyedError(f"issue.{i}.id", f"duplicate id {issue_id!r} (also issue.{ids.index(issue_id)})")
        return self


def load_registry(path: Path) -> tuple[KnownIssue, ...]:
    if not path.is_file():
        return ()
    return validate(Registry, read_toml(path), path).issue


def known_status(row, issues: tuple[KnownIssue, ...]) -> tuple[str, KnownIssue | None]:
    """(status, the issue that matched) of one record or row: its verdict, or xfail/xpass."""
    issue = next((i for i in issues if i.matches(row)), None)
    status = row["verdict"]
    if issue is not None and status == issue.expected:
        status = "xfail"
    elif issue is not None and status == "pass":
        status = "xpass"
    return status, issue


def apply_known_issues(frame: pd.DataFrame, issues: tuple[KnownIssue, ...]) -> pd.DataFrame:
    """Set status xfail/xpass where a known issue matches; fill known_issue and reported."""
    matched = [known_status(row, issues) for row in frame.to_dict("records")]
    return frame.assign(status=[status for status, _ in matched],
                        known_issue=[issue.id if issue else None for _, issue in matched],
                        reported=[f"{issue.title}: {issue.reported} [{issue.source}]" if issue else None
                                  for _, issue in matched])
