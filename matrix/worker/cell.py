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

from .engines import Unsupported, load_engine
from .probe import describe


def log(message):
    print("[trtmatrix] " + message, flush=True)


def write_json(path, data):
    tmp = path + ".tmp"
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


def execute(spec):
    engine = load_engine(spec["engine"])
    profile = spec["profile"]
    with np.load(spec["inputs"]) as data:
        inputs = {name: data[name] for name in data.files}
    inject_fault(profile.get("inject"))
    result = engine.run(spec, inputs, log)
    outputs = result["outputs"]
    if profile.get("inject") == "nan":
        outputs = {name: np.full_like(value, np.nan) for name, value in outputs.items()}
    np.savez(os.path.join(spec["out_dir"], "outputs.npz"), **outputs)
    return {"status": "ok", "build_s": result["build_s"], "infer_ms": result["infer_ms"],
            "info": result["info"]}


def run_cell(spec_path):
    with open(spec_path) as fh:
        spec = json.load(fh)
    record = {"cell_id": spec["cell_id"], "error": None}
    try:
        record.update(describe(spec["engine"]))
        record.update(execute(spec))
    except Unsupported as exc:
        record.update(status="skipped", error=str(exc))
    except Exception as exc:
        traceback.print_exc()
        record.update(status="error", error="{}: {}".format(type(exc).__name__, exc))
    write_json(os.path.join(spec["out_dir"], "result.json"), record)
    log("cell finished: {}".format(record["status"]))
    return 0


if __name__ == "__main__":
    sys.exit(run_cell(sys.argv[1]))
