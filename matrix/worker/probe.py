"""Report what an environment really contains, as one JSON line on stdout."""

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
    info.update(engine.device())
    info.update(nvidia_facts())
    return info


def nvidia_facts():
    """Driver and GPU as seen from inside the environment (a container sees only its own GPU).
    CUDA_VERSION is set by NVIDIA's CUDA and NGC images."""
    facts = {"cuda_version": os.environ.get("CUDA_VERSION")}
    try:
        line = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                              timeout=30, check=True).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return facts
    name, driver = [part.strip() for part in line.split(",", 1)]
    facts.update(gpu=name, driver_version=driver)
    return facts


def probe(engine_name):
    try:
        info = describe(engine_name)
    except Exception as exc:  # the host turns this into 'skipped' cells with the reason
        print(json.dumps({"error": "{}: {}".format(type(exc).__name__, exc)}))
        return 1
    print(json.dumps(info))
    return 0
