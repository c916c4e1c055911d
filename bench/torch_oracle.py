"""Eager PyTorch as its users run it, against every torch CUDA cell of a run (issue 43): does a cell's
status say what the module itself does on that device?

For each cell of the torch CUDA environment in a run folder, builds the case's module afresh from its
case file (its seed, parameters and options: the inputs it builds must equal the cell's inputs file,
else the oracle says so), moves it to the GPU in the cell's dtype, sets what the profile sets (TF32,
the one SDPA kernel allowed, torch.compile) and runs it once on the cell's own inputs, then judges
that output against the cell's float64 reference with the cell's tolerance. The module's outcome
(ran, no SDPA kernel for it, raised) must be the cell's (pass or fail, skipped, error): exit 1
naming every cell where it is not. Verdicts (pass/fail) are compared too and reported; they may
differ only where a run's kernels differ between processes. Cells routed away from this GPU model
are left out.

    python bench/torch_oracle.py -c bench/gpu-scaling.toml [--run RUN_FOLDER] [--env torch-host-cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from matrix.compare import compare_runs  # noqa: E402
from matrix.plan import build_plan  # noqa: E402
from matrix.prepare import INPUTS, REFERENCE  # noqa: E402
from matrix.store import list_runs, read_run  # noqa: E402
from matrix.store.cache import artifacts_folder  # noqa: E402

DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}
KERNELS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


def eager(module, inputs: dict, profile, torch, place: str) -> tuple[str, object]:
    """("ran", outputs) | ("skipped", why) | ("error", why): the module once, as a user calls it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype = getattr(torch, DTYPES[profile.precision])
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = profile.precision == "tf32"
    try:
        model = copy.deepcopy(module).to(place, dtype)
        if profile.compile:
            torch._dynamo.reset()
            model = torch.compile(model)
        args = [torch.from_numpy(value).to(place) for value in inputs.values()]
        args = [a.to(dtype) if a.is_floating_point() else a for a in args]
        kernel = sdpa_kernel(getattr(SDPBackend, KERNELS[profile.sdpa_backend])) if profile.sdpa_backend \
            else contextlib.nullcontext()
        with torch.no_grad(), kernel:
            outputs = model(*args)
        if place != "cpu":
            torch.cuda.synchronize()
    except RuntimeError as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        return ("skipped" if "No available kernel" in str(exc) else "error"), f"{type(exc).__name__}: {first}"
    except Exception as exc:  # noqa: BLE001 - what the module raises is the finding
        return "error", f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return "ran", [o.detach().float().cpu().numpy() if o.is_floating_point() else o.cpu().numpy() for o in outputs]


def main() -> None:
    import numpy as np
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--config", type=Path, required=True)
    parser.add_argument("--run", type=Path, help="a run folder (default: the config's latest run)")
    parser.add_argument("--env", default="torch-host-cuda")
    args = parser.parse_args()
    plan = build_plan(args.config, only_envs=[args.env])
    run_dir = args.run or list_runs(plan.path("reports_dir"))[-1]
    frame = read_run(run_dir)
    frame = frame[(frame["env"] == args.env) & ~frame["error"].fillna("").str.contains("case runs only on GPUs")]
    artifacts_root = artifacts_folder(plan.path("cache_dir"))
    place = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: a dry run against a CPU environment
    gpu = torch.cuda.get_device_name(0) if place == "cuda" else "CPU"
    rows, built = [], {}
    for record in frame.to_dict("records"):
        case = plan.cases[record["case"]]
        params = record["params"] if isinstance(record["params"], dict) else json.loads(record["params"])
        folder = artifacts_root / record["artifact"]
        key = (record["case"], json.dumps(params, sort_keys=True))
        if key not in built:
            torch.manual_seed(case.torch_case.seed)
            module, made = case.torch_case.build(**params, **case.entry.options)
            with np.load(folder / INPUTS) as data:
                inputs = {name: data[name] for name in data.files}
            same = made.keys() == inputs.keys() and all(np.array_equal(made[n].numpy(), inputs[n]) for n in inputs)
            with np.load(folder / REFERENCE) as data:
                reference = {name: data[name] for name in data.files}
            built = {key: (module.float().eval(), inputs, reference, same)}  # one case's module at a time
        module, inputs, reference, same = built[key]
        profile = plan.profile(record["profile"])
        outcome, value = eager(module, inputs, profile, torch, place)
        verdict = None
        if outcome == "ran":
            tol = plan.tolerance(next(c for c in plan.cells if c.cell_id == record["cell_id"]))
            verdict = compare_runs([dict(zip(reference, value))], reference, tol.atol, tol.rtol)[0]
        cell = {"pass": "ran", "fail": "ran"}.get(record["status"], record["status"])
        rows.append({"cell": record["cell_id"], "cell_status": record["status"], "eager": outcome,
                     "eager_verdict": verdict, "agrees": cell == outcome, "verdict_agrees": verdict == record["status"]
                     if outcome == "ran" else None, "why": value if outcome != "ran" else None,
                     "cell_error": record["error"] if cell != outcome else None, "inputs_same": same})
    disagree = [r for r in rows if not r["agrees"]]
    verdicts = [r for r in rows if r["verdict_agrees"] is not None]
    print(f"{len(rows)} torch CUDA cells of {run_dir.name} ({gpu}): eager PyTorch "
          f"agrees with {len(rows) - len(disagree)} cells' status; verdicts equal in "
          f"{sum(r['verdict_agrees'] for r in verdicts)} of {len(verdicts)} that ran")
    for row in disagree:
        print(f"  DISAGREES {row['cell']}: cell {row['cell_status']} ({row['cell_error']}), eager {row['eager']} "
              f"({row['why']})")
    for row in (r for r in verdicts if not r["verdict_agrees"]):
        print(f"  verdict differs {row['cell']}: cell {row['cell_status']}, eager {row['eager_verdict']}")
    counts = {}
    for row in rows:
        counts[f"{row['cell_status']}/{row['eager']}"] = counts.get(f"{row['cell_status']}/{row['eager']}", 0) + 1
    print(json.dumps({"run": run_dir.name, "gpu": gpu, "torch": torch.__version__,
                      "cells": len(rows), "status_agrees": len(rows) - len(disagree), "cell/eager": counts,
                      "verdicts_equal": sum(r["verdict_agrees"] for r in verdicts), "ran": len(verdicts),
                      "inputs_rebuilt_equal": all(r["inputs_same"] for r in rows),
                      "disagreements": [r["cell"] for r in disagree]}))
    sys.exit(1 if disagree else 0)


if __name__ == "__main__":
    main()
