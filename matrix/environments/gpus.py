"""Which NVIDIA GPUs this host has, as nvidia-smi sees them (none on CPU-only machines), those of
them trtmatrix may use (CUDA_VISIBLE_DEVICES), and the facts about them that a GPU environment's
results depend on.

NOT YET RUN ON A GPU HOST from this repository's tests: parse_smi_report is tested on the real
`nvidia-smi -q` output of a driver 580 host; host_gpu_facts only runs nvidia-smi and parses;
CUDA_VISIBLE_DEVICES is tested against a faked nvidia-smi (tests/test_gpu_spread.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache

from ..config import ConfigError
from ..store.hashing import hash_json
from .definitions import EnvDef

# The lines of `nvidia-smi -q` that a measurement depends on.
SMI_FIELDS = {"Product Name": "gpus", "Driver Version": "driver", "CUDA Version": "cuda"}
VISIBLE = "CUDA_VISIBLE_DEVICES"


def host_gpus() -> dict[int, str]:
    """{the host's index of a GPU (nvidia-smi's numbering): its model} of the GPUs trtmatrix may
    lease: every GPU nvidia-smi lists, or only those CUDA_VISIBLE_DEVICES names ("0,2"; empty:
    none), as a user holds a run to some GPUs of a shared host. Read each time, not once per
    process: a Ray worker process runs tasks under different values."""
    return _visible(os.environ.get(VISIBLE))


@cache
def _listed() -> tuple[str, ...]:
    if not shutil.which("nvidia-smi"):
        return ()
    try:
        listing = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return ()
    return tuple(line.strip() for line in listing.splitlines() if line.strip())


@cache
def _visible(value: str | None) -> dict[int, str]:
    """ConfigError (exit 2, one line) for a value that names no GPU nvidia-smi lists; a host where
    it lists none has no GPU to hold a run to (its GPU environments are skipped, saying so)."""
    listed = _listed()
    if value is None or not listed:
        return dict(enumerate(listed))
    entries = [entry.strip() for entry in value.split(",")] if value.strip() else []
    wrong = [entry for entry in entries if not (entry.isdigit() and int(entry) < len(listed))]
    if wrong or len(set(map(int, entries))) < len(entries):
        what = f"{wrong[0]!r} names no GPU of this host" if wrong else "names a GPU twice"
        raise ConfigError(f"{VISIBLE}={value}", "", f"{what}; trtmatrix takes the host's GPU indices as nvidia-smi "
                          f"numbers them (0 to {len(listed) - 1}, comma-separated: its {len(listed)} GPUs "
                          "are " + ", ".join(f"{i} {name}" for i, name in enumerate(listed)) + "), or an empty "
                          "value for none")
    return {int(entry): listed[int(entry)] for entry in entries}


@cache
def host_gpu_facts() -> dict:
    try:
        report = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return {}
    return parse_smi_report(report)


def parse_smi_report(report: str) -> dict:
    """{"gpus": [model, ...], "driver": version, "cuda": version} from `nvidia-smi -q`."""
    facts: dict = {"gpus": []}
    for line in report.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        field = SMI_FIELDS.get(key)
        if field == "gpus":
            facts["gpus"].append(value)
        elif field:
            facts[field] = value
    return facts


def with_host_gpus(envdef: EnvDef, fingerprint: str) -> str:
    """A GPU environment's fingerprint: the backend's own, plus this host's GPU models, driver and
    CUDA version (a result measured on one is not a result on another). Others: unchanged."""
    return hash_json([fingerprint, host_gpu_facts()]) if envdef.gpu else fingerprint


def gpu_missing_reason() -> str | None:
    if not shutil.which("nvidia-smi"):
        return "no NVIDIA GPU on this host (nvidia-smi not found)"
    if not _listed():
        return "no NVIDIA GPU on this host (nvidia-smi lists none)"
    if not host_gpus():
        return f"no NVIDIA GPU for trtmatrix ({VISIBLE} is empty; nvidia-smi lists {len(_listed())})"
    return None
