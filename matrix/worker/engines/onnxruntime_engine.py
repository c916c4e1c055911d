"""onnxruntime on the CPU: the engine that runs everywhere, so the whole matrix runs in CI.

Profile mapping: optimization "off" → ORT_DISABLE_ALL, "on" → ORT_ENABLE_ALL. FP16 profiles get
an FP16 copy of the model made on the host (keep_fp32 ops left in FP32).

When onnxruntime refuses the model while creating its session (an IR version or opset it does not
read, an operator it does not register, no CPU kernel for an operator in these types, an attribute
or an attribute value it does not support, a locale the host lacks), or a kernel says at the first
inference that it does not support what it was given ("Non per-tensor quantization is not
supported"), or a kernel fails in the same words whatever the inputs' values (float Mod with
fmod = 0 before opset 28), the cell is `unsupported`: what is unsupported first, its own words after.
Anything else it raises is an `error`: something broke.
"""

import json
import os
import re
import shutil
import time

import numpy as np
import onnxruntime as ort

from ..files import PROFILE
from ..op_kinds import VALUE_MOVING
from . import Refused, timed_runs

# (what onnxruntime says, the cause as trtmatrix names it): checked in this order.
REFUSALS = [
    (r"Unsupported model IR version: (\d+), max supported IR version: (\d+)",
     lambda m, _: "IR version {} (reads up to {})".format(*m.groups())),
    (r"Opset (\d+) is under development.*?official support for domain ([\w.]+) is till opset (\d+)",
     lambda m, _: "opset {} of {} (reads up to {})".format(*m.groups())),
    (r"([\w.]+:)?(\w+)\((-?\d+)\) is not a registered function/op",
     lambda m, _: "operator {}{} not registered".format(m.group(1) or "", m.group(2))),
    (r"No Op registered for (\w+) with domain_version of (\d+)",
     lambda m, _: "operator {}({}) not registered".format(*m.groups())),
    (r"(?:Could not find an implementation for|Failed to find kernel for) (\w+)\((\d+)\)",
     lambda m, types: "no CPU kernel for {}({}){}".format(m.group(1), m.group(2), _typed(types.get(m.group(1))))),
    # what the host lacks, not the model: StringNormalizer's locale (issue 41, sweep 8 A5)
    (r"Failed to construct locale with name:\s*([^:\s]+)",
     lambda m, _: "StringNormalizer's locale {} is not installed where onnxruntime runs (`locale -a` lists "
                  "those that are)".format(m.group(1))),
    (r"Exception during initialization: .*? ([^.]*?\bnot supported)\.",
     lambda m, _: m.group(1)),
    # An attribute of a newer opset than the runtime knows (Attention's left_window_size): named,
    # not cut off in "This is an invalid model. In Node, (...) : (...) -> (...), Error ...".
    (r"Unrecognized attribute: (\w+) for operator (\w+)",
     lambda m, _: "attribute {} of {} not recognised".format(*m.groups())),
]
# ... and when it refuses at the first inference (a kernel that checks its inputs then).
RUN_REFUSALS = [
    # after the node's name ("Name:'y_nchwc'"): the kernel's words from its status message on
    (r"while running (\w+) node\..*?(?:Status Message: )?([^.:]*?\bnot (?:yet )?supported)",
     lambda m, _: "{}: {}".format(m.group(1), m.group(2).strip())),
    # an output of a type numpy lacks (bfloat16, int4): its Python API cannot hand the value back
    # (issue 41, sweep 7 N2; a float8 output comes back as its bits and is judged, but not before
    # 1.21, whose words name no type: sweep 11 D8)
    (r"No corresponding Numpy type for Tensor Type\.(?: (\w+))?",
     lambda m, _: ("a {} output: numpy has no such type".format(m.group(1)) if m.group(1) else
                   "an output of a type numpy lacks") + ", so onnxruntime's Python API cannot return it"),
]


def _typed(types):
    return " with {} inputs".format("/".join(types)) if types else ""


def refusal(message, input_types, patterns=REFUSALS):
    """The cause of a refusal ('IR version 11 (reads up to 9)'), or None for anything else."""
    for pattern, cause in patterns:
        found = re.search(pattern, message, re.S)
        if found:
            return cause(found, input_types)
    return None


def refused_whatever_the_inputs(words, feeds, run):
    """The cause where a kernel failed at an inference and fails in the same words again on the inputs
    all zeros and all ones (same shapes and types): what the model is, not its values (float Mod with
    fmod = 0 before opset 28: issue 41, sweep 9 B2), else None. An index out of range or an integer
    division by zero runs on zeros or on ones, or fails in other words: the inputs' fault."""
    found = re.search(r"while running (\w+) node\..*?Status Message: (.*)", words, re.S)
    if not found:
        return None
    for fill in (np.zeros_like, np.ones_like):
        try:
            run({name: fill(value) for name, value in feeds.items()})
        except Exception as exc:  # noqa: BLE001 - compared with the first failure's words
            if str(exc).strip() != words.strip():
                return None
        else:
            return None
    # an ORT_ENFORCE's message follows "<source> <function> <condition> was false. "
    said = found.group(2).strip().split(" was false. ")[-1].splitlines()[0][:200]
    return "{}: {}, whatever the inputs' values (zeros and ones fail alike)".format(found.group(1), said)


def _refused(exc, patterns, input_types, otherwise=lambda words: None):
    """Refused (the cell is `unsupported`) where `exc` is a refusal (`patterns`, else the cause
    `otherwise` finds in its words), else None."""
    words = str(exc).strip()
    cause = refusal(words, input_types, patterns) or otherwise(words)
    return Refused("{} — onnxruntime {}: {}".format(cause, ort.__version__, words)) if cause else None


def version():
    return ort.__version__


def device():
    return {"gpu": None, "device": "cpu"}


def _input_types(spec):
    """{op type: input element types} of the model this cell runs, made on the host."""
    path = spec.get("input_types")
    if not path:
        return {}
    with open(path) as fh:
        return json.load(fh)


def _session(spec, options=None):
    options = options or ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                                        if spec["profile"]["optimization"] == "off"
                                        else ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    try:
        return ort.InferenceSession(spec["model"], options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        refused = _refused(exc, REFUSALS, _input_types(spec))
        if refused is None:
            raise
        raise refused from None


def run(spec, inputs, log):
    """Every inference's outputs are returned (warm-up first): the host judges the worst of them
    and reports any run-to-run drift."""
    start = time.perf_counter()
    session = _session(spec)
    build_s = time.perf_counter() - start
    log("session created in {:.3f}s with providers {}".format(build_s, session.get_providers()))
    feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    # A sequence output comes back as a list of arrays and is kept so (worker/values.py).
    try:
        runs, times = timed_runs(lambda: session.run(names, feeds),
                                 lambda outputs: dict(zip(names, (o if isinstance(o, list) else np.asarray(o)
                                                                  for o in outputs))))
    except Exception as exc:
        refused = _refused(exc, RUN_REFUSALS, {}, lambda words: refused_whatever_the_inputs(
            words, feeds, lambda other: session.run(names, other)))
        if refused is None:
            raise
        raise refused from None
    info = {"precision_ran": precision_ran(spec, feeds, names)} if spec["profile"]["precision"] != "fp32" else {}
    return {"runs": runs, "build_s": build_s, "infer_times_ms": times, "info": info}


REDUCED = {"float16", "bfloat16"}
# Nodes that do no arithmetic: onnxruntime's Casts, ops that only move or select values (a Reshape
# of FP16 values around float32 arithmetic computed nothing in FP16), and control flow, whose outputs
# are FP16 while every node of its body may run in float32 (each body node has its own event).
NOT_COMPUTING = VALUE_MOVING | {"Shape", "Size", "If", "Loop", "Scan"}


def precision_ran(spec, feeds, names):
    """What each node computed in, from one profiled inference of its own session (the timed ones
    stay unprofiled): onnxruntime runs a node of an FP16 copy that has no FP16 kernel in float32,
    behind Casts it inserts, and says so nowhere else. {"reduced": nodes that ran in FP16/BF16,
    "reduced_nodes": their names, "wider": {op: nodes that ran in float32 or double},
    "wider_nodes": their names}."""
    folder = os.path.join(spec["out_dir"], PROFILE)
    shutil.rmtree(folder, ignore_errors=True)  # a killed cell's, from an earlier run
    os.mkdir(folder)
    try:
        options = ort.SessionOptions()
        options.enable_profiling, options.profile_file_prefix = True, os.path.join(folder, "profile")
        session = _session(spec, options)
        session.run(names, feeds)
        with open(session.end_profiling()) as fh:
            events = json.load(fh)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    reduced_nodes, wider, wider_nodes = [], {}, []
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time") or \
                args.get("op_name") in NOT_COMPUTING:
            continue
        types = {t for shapes in (args.get("input_type_shape") or []) + (args.get("output_type_shape") or [])
                 for t in shapes}
        name = event["name"][:-len("_kernel_time")]
        if types & REDUCED:
            reduced_nodes.append(name)
        elif types & {"float", "double"}:
            wider[args["op_name"]] = wider.get(args["op_name"], 0) + 1
            wider_nodes.append(name)
    return {"reduced": len(reduced_nodes), "reduced_nodes": reduced_nodes, "wider": wider, "wider_nodes": wider_nodes}
