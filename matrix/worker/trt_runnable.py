"""Whether a TensorRT engine built here can also run here, decided before building (stdlib only).

TensorRT-RTX builds on any machine, the CPU included, and runs only on the GPUs it targets. Those
are the members of its own `ComputeCapability` enum (SM75, SM80, SM86, SM89, SM120, ... in 1.7;
SM90 of the H100 is in none of 1.4-1.7, and TensorRT-RTX 1.7.1 refuses that GPU in these words:
"The engine cannot run on this GPU, which has compute capability 9.0. Supported compute
capabilities: 8.0 8.6 8.9 12.0 12.1 >12.0"). GPUs newer than 12.x count as supported, as that
message says. Full TensorRT runs on every GPU it supports at all (it is only given GPU hosts).
"""

import re

SM = re.compile(r"^SM(\d+)(\d)$")


def rtx_capabilities(enum_names):
    """'SM89' → '8.9', for the members of tensorrt_rtx.ComputeCapability that name a GPU."""
    found = [SM.match(name) for name in enum_names]
    return sorted(("{}.{}".format(*m.groups()) for m in found if m), key=lambda c: tuple(map(int, c.split("."))))


def not_runnable_reason(product, version, facts, capabilities=None):
    """Why the engine cannot run here, or None. `facts`: what the worker found out about its GPU
    (probe.nvidia_facts: gpu, compute_capability); `capabilities`: the product's list ("8.9", ...),
    None for full TensorRT."""
    if not facts.get("gpu"):
        return "not run: no NVIDIA GPU visible to this environment"
    if capabilities is None:
        return None
    capability = facts.get("compute_capability")
    if not capability:
        return "not run: the compute capability of {} could not be read".format(facts["gpu"])
    major = int(capability.split(".")[0])
    if capability in capabilities or major > 12:
        return None
    return "not run: {} has compute capability {}, which {} {} does not support (it supports {})".format(
        facts["gpu"], capability, product, version, ", ".join(capabilities))
