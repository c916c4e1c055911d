"""`trtmatrix bisect ROW --engine E --good A --bad B`: since which release is a row's verdict B's?

A binary search over the engine's releases between A and B, each step an ordinary cell run of the
row in that release's environment (isolated, cached, judged like any cell): about log2(n) runs.
The finding reads forwards, in release order: A older than B is a regression (`last_good`,
`first_bad`), A later than B a fix (`last_bad`, `first_good`).

Releases are final releases only, as pip installs them: a nightly or release candidate
(`1.25.0.dev20260417008`) is a build nobody upgrades to, and naming it as the first good
"release" misleads. `--pre` takes them in, as pip's own `--pre` does.

Where the versions come from (`--engine`):
- onnxruntime: every release on the package index that has a wheel for this Python (its Simple
  API, PEP 691, through pypi-simple; not `pip index versions --json`, which pip 23.2 lacks);
- tensorrt: the versions of the tensorrt definitions in images/ (NGC tags, or the pip wheels they
  name) — not run on real TensorRT from this repository.
A version without a definition in images/ gets a venv environment made on the fly (uv, pinned
`engine==version` and numpy), cached like any other.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd
from packaging.tags import sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..environments.definitions import EnvDef, available_envdefs
from ..plan import Plan, plan_for_row
from ..run import MatrixRun
from ..statuses import REGRESSED, UNJUDGED

# Works with every onnxruntime release on PyPI for Python 3.11 (1.15.0-1.32.0, measured).
NUMPY_PIN = "numpy==1.26.4"
PYPI_PACKAGE = {"onnxruntime": "onnxruntime"}
# What an end may be: it passes, or it does not as a regression counts it (wrong numbers, an error,
# a crash, a timeout: a release that starts crashing is as much a regression as one that fails).
ENDS = {"pass", *REGRESSED}


class BisectError(ValueError):
    """Not a question bisect can answer (same verdict at both ends, unknown version…)."""


@dataclass
class Step:
    version: str
    status: str
    max_abs: float | None
    environment: str
    error: str | None = None


@dataclass
class Bisection:
    row: str
    engine: str
    good: str
    bad: str
    versions: list[str]
    source: str
    tested: list[Step] = field(default_factory=list)
    boundary: tuple[str, str] | None = None  # (the older, the newer) release where the verdict changes

    @property
    def direction(self) -> str:
        return "regression" if Version(self.good) < Version(self.bad) else "fix"

    def found(self) -> dict[str, str | None]:
        """The boundary in release order, named for what happened there."""
        older, newer = self.boundary or (None, None)
        if self.direction == "regression":
            return {"last_good": older, "first_bad": newer}
        return {"last_bad": older, "first_good": newer}

    def summary(self) -> str:
        found = "; ".join(f"{name.replace('_', ' ')}: {version}" for name, version in self.found().items())
        return f"{self.direction}: {found} ({len(self.tested)} of {len(self.versions)} releases run; versions from {self.source})"

    def to_json(self) -> dict:
        return {"row": self.row, "engine": self.engine, "good": self.good, "bad": self.bad,
                "direction": self.direction, **self.found(), "summary": self.summary(), "source": self.source,
                "versions": self.versions,
                "tested": [{"version": s.version, "status": s.status, "max_abs": s.max_abs,
                            "environment": s.environment} for s in self.tested]}


def index_url() -> str | None:
    """The package index pip is configured with here (PIP_INDEX_URL, or pip's own configuration),
    or None for the public index: bisect asks the index the venvs install from."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    found = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                           capture_output=True, text=True, timeout=60)
    return found.stdout.strip() or None if found.returncode == 0 else None


def index_versions(package: str) -> list[str]:
    """Every release of `package` with a wheel for this Python, from the index's Simple API (the
    PEP 691 JSON form where the index serves it) through pypi-simple."""
    from pypi_simple import PyPISimple

    endpoint = index_url()
    here = set(sys_tags())
    try:
        with (PyPISimple(endpoint) if endpoint else PyPISimple()) as client:
            files = client.get_project_page(package).packages
    except Exception as exc:  # noqa: BLE001 - requests' and pypi-simple's errors mean the same here
        raise BisectError(f"cannot list {package} releases on the package index: {type(exc).__name__}: {exc}") from None
    versions = set()
    for file in files:
        if file.package_type == "wheel" and file.version and not file.is_yanked:
            try:
                if set(parse_wheel_filename(file.filename)[3]) & here:
                    versions.add(file.version)
            except InvalidWheelFilename:
                continue
    return sorted(versions, key=Version)


def released_versions(engine: str, envdefs: list[EnvDef], pre: bool = False) -> tuple[list[str], str]:
    """(every release of the engine, oldest first, pre-releases only with `pre`; where the list comes from)."""
    if engine in PYPI_PACKAGE:
        package = PYPI_PACKAGE[engine]
        versions, source = index_versions(package), f"the package index: releases of {package} with a wheel for this Python"
    else:
        versions = sorted({e.version for e in envdefs if e.engine == engine and e.version}, key=Version)
        source = f"the {engine} definitions in images/ (their NGC tags or pinned wheels)"
        if not versions:
            raise BisectError(_no_releases(engine, [e for e in envdefs if e.engine == engine]))
    if pre:
        return versions, source + ", pre-releases included"
    return [v for v in versions if not Version(v).is_prerelease], source + ", final releases only"


def _no_releases(engine: str, definitions: list[EnvDef]) -> str:
    """Why an engine searched through its definitions has nothing to search, and what would give it some."""
    have = (f"its definitions in images/ ({', '.join(sorted(e.name for e in definitions))}) name no version "
            "(a host environment runs whatever the host has)") if definitions else "no definition in images/ is for it"
    return (f"--engine {engine}: no releases to search: bisect searches {engine}'s releases among the versions of its "
            f"definitions in images/, and {have}. Give each release to search a definition with its version "
            f"(a venv: version = \"2.5.1\", requirements = [\"{engine}==2.5.1\", \"numpy\"]); onnxruntime's releases "
            "come from the package index")


def between(versions: list[str], good: str, bad: str) -> list[str]:
    """The versions from A to B inclusive, in search order (A first), whichever is older."""
    for name, version in (("--good", good), ("--bad", bad)):
        if version not in versions:
            hint = _why_not_listed(version)
            raise BisectError(f"{name} {version} is not a known release{hint} ({', '.join(versions[-8:])}, …)")
    low, high = sorted((Version(good), Version(bad)))
    span = [v for v in versions if low <= Version(v) <= high]
    return span if Version(good) < Version(bad) else span[::-1]


def _why_not_listed(version: str) -> str:
    """The hint for a version that is not in the list: a pre-release left out, or no version at all."""
    try:
        return " (a pre-release: --pre takes them in)" if Version(version).is_prerelease else ""
    except InvalidVersion:
        return " (not a version number)"


def envdef_for(engine: str, version: str, known: list[EnvDef]) -> EnvDef:
    """The definition in images/ for this version (CPU before GPU, a venv before a container), else
    a venv made on the fly."""
    matching = sorted((e for e in known if e.engine == engine and e.version == version),
                      key=lambda e: (e.gpu, e.backend != "venv"))
    if matching:
        return matching[0]
    if engine not in PYPI_PACKAGE:
        raise BisectError(f"no definition in images/ for {engine} {version}")
    return EnvDef(name=f"{engine}-{version}", engine=engine, version=version, backend="venv",
                  requirements=(f"{PYPI_PACKAGE[engine]}=={version}", NUMPY_PIN),
                  source=f"made by trtmatrix bisect: {PYPI_PACKAGE[engine]}=={version} from the package index")


def search(bisection: Bisection, run: Callable[[str], Step]) -> Bisection:
    """Binary search, assuming the verdict changes once between A and B: one end passes, the other
    does not (fail, error, crash or timeout), and each release between is on the side of the end
    it is like, passing or not."""
    order = bisection.versions
    ends = [run(order[0]), run(order[-1])]
    bisection.tested.extend(ends)
    for end in ends:  # a cell that did not run, or ran and was not judged, says nothing of the release
        if end.status not in ENDS:
            if end.status in UNJUDGED:  # trtmatrix's side of the comparison, not the engine (sweep 5 #15)
                raise BisectError(f"{bisection.row} was not judged on {bisection.engine} {end.version} ({end.status}): "
                                  f"{end.error}; no version's verdict can be had until the reference can")
            raise BisectError(f"{bisection.row} did not run on {bisection.engine} {end.version} ({end.status}): {end.error}")
    if ends[0].status == ends[1].status:
        raise BisectError(f"{bisection.row} is {ends[0].status} at both {order[0]} and {order[-1]}: nothing to bisect")
    if "pass" not in (ends[0].status, ends[1].status):
        raise BisectError(f"{bisection.row} is {ends[0].status} at {order[0]} and {ends[1].status} at {order[-1]}: "
                          "it passes at neither, nothing to bisect")
    bad_passes = ends[1].status == "pass"
    low, high = 0, len(order) - 1  # verdict at low is A's, at high B's
    while high - low > 1:
        middle = (low + high) // 2
        step = run(order[middle])
        bisection.tested.append(step)
        if (step.status == "pass") == bad_passes:  # the verdict before known issues: what was measured
            high = middle
        else:
            low = middle
    bisection.boundary = tuple(sorted((order[low], order[high]), key=Version))
    return bisection


def bisect_row(plan: Plan, row: str, engine: str, good: str, bad: str, pre: bool = False,
               on_event: Callable[[dict], None] = lambda e: None) -> Bisection:
    """Bisect one row of the plan's matrix; each step runs the row in one environment."""
    if row not in plan.rows:
        raise BisectError(f"{row!r} is not a row of the matrix (rows look like {plan.rows[0]!r})")
    known = available_envdefs(plan.path("images_dir"))
    versions, source = released_versions(engine, known, pre)
    bisection = Bisection(row, engine, good, bad, between(versions, good, bad), source)

    def run(version: str) -> Step:
        envdef = envdef_for(engine, version, known)
        on_event({"event": "bisect", "version": version, "env": envdef.name})
        # the verdict decides a step: no known issue's pattern is observed
        record = MatrixRun(plan_for_row(plan, row, envdef), on_event=on_event, observe=False, command="bisect").judge().iloc[0]
        max_abs = None if pd.isna(record["max_abs"]) else float(record["max_abs"])
        return Step(version, record["verdict"], max_abs, envdef.name, record["error"])

    return search(bisection, run)
