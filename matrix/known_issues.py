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
from pydantic import field_validator

from .config import Name, Strict, read_toml, validate

REGISTRY = "known_issues.toml"


class KnownIssue(Strict):
    id: Name
    title: str
    case: Name
    profiles: tuple[Name, ...]
    params: dict[str, int | float | str | bool] = {}
    engine: Literal["onnxruntime", "tensorrt"]
    versions: str
    gpu: str | None = None  # glob on the GPU name the cell ran on
    expected: Literal["fail", "error", "crash"] = "fail"
    reported: str = ""
    source: str

    @field_validator("versions")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a version specifier: {exc}") from None
        return value

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
    issue: tuple[KnownIssue, ...] = ()


def load_registry(path: Path) -> tuple[KnownIssue, ...]:
    if not path.is_file():
        return ()
    return validate(Registry, read_toml(path), path).issue


def apply_known_issues(frame: pd.DataFrame, issues: tuple[KnownIssue, ...]) -> pd.DataFrame:
    """Set status xfail/xpass where a known issue matches; fill known_issue and reported."""
    frame = frame.copy()
    for index, row in frame.iterrows():
        issue = next((i for i in issues if i.matches(row)), None)
        status = row["verdict"]
        if issue is not None and status == issue.expected:
            status = "xfail"
        elif issue is not None and status == "pass":
            status = "xpass"
        frame.at[index, "status"] = status
        frame.at[index, "known_issue"] = issue.id if issue else None
        frame.at[index, "reported"] = f"{issue.title}: {issue.reported} [{issue.source}]" if issue else None
    return frame
