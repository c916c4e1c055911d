"""One cell in its own process: load inputs, build and run the engine, write outputs + result.

Whatever happens here, the supervisor outlives it: a crash, hang or out-of-memory kills only
this process, and the supervisor records that as the cell's status.
"""

import json
import os
import signal
import sys
import time
import traceback

import numpy as np

from .engines import Refused, Unsupported, check_profile, load_engine
from .files import DIGESTS, OUTPUTS, REPEATS, RESULT, file_digest, save_arrays
from .probe import describe
from .values import flatten, load_values, refusal


def log(message):
    print("[trtmatrix] " + message, flush=True)


def write_json(path, data):
    tmp = "{}.{}.tmp".format(path, os.getpid())  # a file of its own: two writers never mix their halves
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, path)


def inject_fault(kind):
    """Deliberate failures (profile `inject`), so the harness can be tested end to end."""
    if kind == "crash":
        log("injected crash: SIGSEGV")
        os.kill(os.getpid(), signal.SIGSEGV)
    elif kind == "hang":
        log("injected hang")
        time.sleep(10 ** 6)
    elif kind == "raise":
        raise RuntimeError("injected failure <script>alert('x')</script> & more")


def _identical(a, b):
    """Bit for bit: any difference between repeats of one engine on one input is news. The same
    array object is the same bits (an engine that compared on its device hands back the arrays of
    an identical earlier inference: torch_engine)."""
    return a.keys() == b.keys() and all(
        a[n] is b[n] or a[n].shape == b[n].shape and a[n].dtype == b[n].dtype and a[n].tobytes() == b[n].tobytes() for n in a)


def save_runs(out_dir, runs):
    """outputs.npz: the first run (warm-up included). repeats.npz: each later run whose outputs
    differ from every run kept so far, as "<run index>/<output name>", so the host can judge the
    worst run and measure run-to-run drift. Nothing more is written when all runs agree. A
    sequence is kept as its items and its length, a string tensor as numpy's unicode (values.py).
    Returns {file name: digest} of the files written."""
    runs = [flatten(outputs) for outputs in runs]
    save_arrays(os.path.join(out_dir, OUTPUTS), runs[0])
    kept, repeats = [runs[0]], {}
    for index, outputs in enumerate(runs[1:], start=1):
        if not any(_identical(outputs, seen) for seen in kept):
            kept.append(outputs)
            repeats.update({"{}/{}".format(index, name): value for name, value in outputs.items()})
    if repeats:
        save_arrays(os.path.join(out_dir, REPEATS), repeats)
    return {name: file_digest(os.path.join(out_dir, name)) for name in (OUTPUTS, REPEATS) if name == OUTPUTS or repeats}


def execute(spec, clock):
    """Build and run the cell; a TensorRT engine built where it cannot run ends `built`, its build
    facts kept and nothing judged. `clock`: seconds of each part, kept in result.json."""
    engine = load_engine(spec["engine"])
    profile = spec["profile"]
    check_profile(spec["engine"], profile)
    began = time.time()
    inputs, types, kinds = load_values(spec["inputs"])
    clock["inputs_s"] = time.time() - began
    why = refusal(spec["engine"], kinds)
    if why:
        raise Unsupported(why)
    spec = dict(spec, value_kinds=sorted(kinds), value_types=types)
    inject_fault(profile.get("inject"))
    runs, build_s, times, info = [], [], [], {}
    began = time.time()
    for build in range(profile.get("builds", 1)):  # builds > 1: tactic choices may differ per build
        result = engine.run(dict(spec, build_index=build), inputs, log)
        if result.get("not_run"):
            return {"status": "built", "error": result["not_run"], "build_s": result["build_s"], "runs": 0,
                    "device": "none: built, not run", "info": result["info"]}
        runs.extend(result["runs"])
        build_s.append(result["build_s"])
        times.extend(result["infer_times_ms"])
        info = result["info"]
    if profile.get("inject") == "nan":
        runs = [{name: np.full_like(value, np.nan) for name, value in outputs.items()} for outputs in runs]
    elif profile.get("inject") == "drift":  # right on the first inference, off by one on every later one
        runs = runs[:1] + [{name: value + 1 for name, value in outputs.items()} for outputs in runs[1:]]
    clock.update(engine_s=time.time() - began, build_s=sum(build_s), infer_s=sum(times) / 1000)
    began = time.time()
    digests = save_runs(spec["out_dir"], runs)
    clock["save_s"] = time.time() - began
    return {"status": "ok", DIGESTS: digests, "build_s": max(build_s), "infer_ms": float(np.median(times)), "infer_ms_runs": times,
            "runs": len(runs), "runs_per_build": len(runs) // len(build_s), "info": info}


def run_cell(spec_path):
    began = time.time()
    with open(spec_path) as fh:
        spec = json.load(fh)
    clock = dict(spec.get("clock") or {}, begin=began)
    # How the supervisor started this process (fork of a warm supervisor, or a new interpreter).
    record = {"cell_id": spec["cell_id"], "error": None, "cell_start": os.environ.get("TRTMATRIX_CELL_STARTED"),
              "node": spec.get("node"), "gpu_index": spec.get("gpu_index")}  # for the runs that reuse it later
    try:
        facts = describe(spec["engine"])  # the first cell of a worker starts CUDA here
        clock["describe_s"] = time.time() - began
        record.update(facts)
        record.update(execute(dict(spec, device_facts=facts), clock))
    except Unsupported as exc:
        record.update(status="skipped", error=str(exc))
    except Refused as exc:
        record.update(status="unsupported", error=str(exc))
    except Exception as exc:
        traceback.print_exc()
        record.update(status="error", error="{}: {}".format(type(exc).__name__, exc))
    record["clock"] = dict(clock, end=time.time())
    write_json(os.path.join(spec["out_dir"], RESULT), record)
    log("cell finished: {}".format(record["status"]))
    return 0


if __name__ == "__main__":
    sys.exit(run_cell(sys.argv[1]))
