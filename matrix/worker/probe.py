"""Report what an environment really contains, as one JSON line on stdout."""

import functools
import json
import os
import platform
import subprocess

from .engines import load_engine


def describe(engine_name):
    engine = load_engine(engine_name)
    info = {"engine": engine_name, "engine_version": engine.version(),
            "python_version": platform.python_version()}
    if engine_name == "tensorrt":  # the layer between trtmatrix and TensorRT: the image's own or the staged one
        info["polygraphy_version"] = engine.polygraphy_version()
        info["product"] = engine.PRODUCT
    info.update(_nvidia_facts())
    # The engine's own word wins: the CUDA runtime torch was built with, not the image's CUDA_VERSION.
    info.update({key: value for key, value in engine.device().items() if value is not None})
    return info


@functools.lru_cache(maxsize=None)
def _nvidia_facts():
    """Once per process: a warm worker's cells share its GPU (NVML or nvidia-smi cost ~0.1 s a call)."""
    return nvidia_facts()


def nvidia_facts():
    """Driver and GPU as seen from inside the environment: a container sees only its own GPU (as
    GPU 0); a venv or host environment is given its leased GPU in CUDA_VISIBLE_DEVICES (NVML and
    nvidia-smi count every GPU, so that index is the one to ask about), and a CPU environment none
    (an empty CUDA_VISIBLE_DEVICES: no GPU facts). nvidia-ml-py where installed, else nvidia-smi.
    CUDA_VERSION is set by NVIDIA's CUDA and NGC images."""
    facts = {"cuda_version": os.environ["CUDA_VERSION"]} if os.environ.get("CUDA_VERSION") else {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible == "":
        return facts
    index = int(visible) if visible and visible.isdigit() else 0
    try:
        facts.update(_nvml_facts(index))
        return facts
    except Exception:  # noqa: BLE001 - no nvidia-ml-py, or no driver: try nvidia-smi
        pass
    try:
        lines = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                               timeout=30, check=True).stdout.splitlines()
        name, driver, capability = [part.strip() for part in lines[index].rsplit(",", 2)]
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return facts
    facts.update(gpu=name, driver_version=driver, compute_capability=capability)
    return facts


def _nvml_facts(index):
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name, driver = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlSystemGetDriverVersion()
        capability = "{}.{}".format(*pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    finally:
        pynvml.nvmlShutdown()
    text = [value.decode() if isinstance(value, bytes) else value for value in (name, driver)]
    return {"gpu": text[0], "driver_version": text[1], "compute_capability": capability}


def probe(engine_name):
    try:
        info = describe(engine_name)
    except Exception as exc:  # the host turns this into 'skipped' cells with the reason
        print(json.dumps({"error": "{}: {}".format(type(exc).__name__, exc)}))
        return 1
    print(json.dumps(info))
    return 0
