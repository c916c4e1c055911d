"""The package's layers (import-linter contracts in pyproject.toml) hold, and a module that
breaks one fails with the contract's name: checked on a copy of the package with a wrong import
planted in it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-logo", "--no-cache"], cwd=root, capture_output=True, text=True,
                          env={"PATH": str(LINT.parent), "PYTHONPATH": str(root), "COLUMNS": "200"})


@pytest.fixture
def copy(tmp_path) -> Path:
    shutil.copytree(REPO / "matrix", tmp_path / "matrix", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_contracts_hold_on_the_package(copy):
    result = lint(copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize("module, planted, contract", [
    ("store/records.py", "from ..report import html  # noqa", "matrix layers: each imports only those below it"),
    ("environments/images.py", "from .. import run  # noqa", "matrix layers: each imports only those below it"),
    ("worker/probe.py", "from .. import config  # noqa", "matrix.worker imports nothing of the orchestrator"),
    ("worker/cell.py", "import pandas  # noqa", "matrix.worker needs only stdlib, numpy and its engine"),
    ("worker/supervisor.py", "import onnxruntime  # noqa", "each engine's runtime is imported only by its own engine module"),
])
def test_a_planted_wrong_import_breaks_its_contract(copy, module, planted, contract):
    path = copy / "matrix" / module
    path.write_text(path.read_text() + f"\n{planted}\n")
    result = lint(copy)
    assert result.returncode == 1
    broken = [line for line in result.stdout.splitlines() if " BROKEN" in line]
    assert any(line.startswith(contract) for line in broken), result.stdout
