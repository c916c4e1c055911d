"""Which NVIDIA GPUs this host has, as nvidia-smi sees them (none on CPU-only machines), and the
facts about them that a GPU environment's results depend on.

NOT YET RUN ON A GPU HOST from this repository's tests: parse_smi_report is tested on the real
`nvidia-smi -q` output of a driver 580 host; host_gpu_facts only runs nvidia-smi and parses.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache

from ..store.hashing import hash_json
from .definitions import EnvDef

# The lines of `nvidia-smi -q` that a measurement depends on.
SMI_FIELDS = {"Product Name": "gpus", "Driver Version": "driver", "CUDA Version": "cuda"}


@cache
def host_gpus() -> tuple[str, ...]:
    if not shutil.which("nvidia-smi"):
        return ()
    try:
        listing = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return ()
    return tuple(line.strip() for line in listing.splitlines() if line.strip())


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
    if not host_gpus():
        return "no NVIDIA GPU on this host (nvidia-smi lists none)"
    return None
