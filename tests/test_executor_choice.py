"""`--ray` where it cannot work: one line and exit 2, never a traceback or a wait of minutes."""

import importlib.util
import time

import pytest

from conftest import PROFILES, tiny_case
from test_reports_cli import cli


@pytest.fixture
def config(write_matrix, tiny_model):
    return write_matrix(PROFILES + tiny_case(*tiny_model), environments=("ort-1.32",))


def test_without_ray_installed_run_ray_says_how_to_install_it(config, tmp_path, monkeypatch):
    shadow = tmp_path / "no-ray" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("No module named \'ray\'")\n')  # as if not installed
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))
    done = cli("run", "-c", str(config), "--ray", "auto")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --ray needs Ray: pip install 'trtmatrix[ray]'"
    assert not (tmp_path / "reports" / "runs").exists() or not any((tmp_path / "reports" / "runs").iterdir())


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is an optional extra: pip install '.[ray]'")
def test_a_ray_address_where_nothing_listens_is_one_line_at_once(config):
    started = time.monotonic()
    done = cli("run", "-c", str(config), "--ray", "127.0.0.1:1")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: no Ray cluster answers at 127.0.0.1:1: Connection refused"
    assert time.monotonic() - started < 30
