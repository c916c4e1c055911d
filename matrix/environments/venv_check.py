"""Whether a venv trtmatrix made still holds what it installed, checked before each run uses it.

A package folder removed, or a file of it cut short, after the venv was made would otherwise reach
the cells as the engine's own error (`No module named 'onnxruntime'`) and a regression. Each
installed distribution's RECORD lists its files with their sizes: a stat per file (some 15,000 for
torch, a few hundredths of a second), no hashing; and every package of the lock must be installed.
"""

from __future__ import annotations

import csv
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, canonicalize_version


def _locked(lock: str) -> dict[str, str]:
    """{canonical name: canonical version} of a lock in requirements.txt syntax (`name==version`)."""
    found = {}
    for line in lock.splitlines():
        try:
            requirement = Requirement(line.split("#")[0].strip())
        except InvalidRequirement:  # a blank line, an option
            continue
        pins = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        if pins and (requirement.marker is None or requirement.marker.evaluate()):
            found[canonicalize_name(requirement.name)] = canonicalize_version(pins[0])
    return found


def _record_damage(site: Path, record: Path) -> str | None:
    """The first file of a distribution's RECORD that is missing or of another size, said."""
    with record.open(newline="") as fh:
        for row in csv.reader(fh):
            if not row or "__pycache__" in row[0] or row[0].endswith(".pyc"):
                continue  # bytecode comes and goes with the interpreter's settings
            path = site / row[0]
            try:
                size = path.stat().st_size
            except OSError:
                return f"{path} is missing"
            if len(row) > 2 and row[2].isdigit() and int(row[2]) != size:
                return f"{path} is {size} bytes, not the {row[2]} it was installed with"
    return None


def venv_damage(venv: Path, lock: str) -> str | None:
    """What is wrong with `venv` against the lock it was installed from, in a few words, or None."""
    sites = sorted(venv.glob("lib/python*/site-packages"))
    if not sites:
        return f"{venv / 'lib'} holds no site-packages"
    site = sites[0]
    installed = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name[:-len(".dist-info")].partition("-")
        installed[canonicalize_name(name)] = (canonicalize_version(version), info)
    for name, version in sorted(_locked(lock).items()):
        if name not in installed:
            return f"{name} {version} is not installed in it"
        if installed[name][0] != version:
            return f"{name} is {installed[name][0]} in it, not the {version} of its lock"
        record = installed[name][1] / "RECORD"
        if not record.is_file():
            return f"{record} is missing"
        damage = _record_damage(site, record)
        if damage:
            return damage
    return None
