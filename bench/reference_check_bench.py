"""What checking a reference costs (issue 40): per prepared model, the float64 pass that prepare
made before the check existed (for the FP16 forecast; the reference reads the same pass), against
what the check adds: the referee (onnxruntime, every intermediate kept) and the node-by-node
agreement. Reads the artifacts a run left in a cache, so it measures real prepared models.

    .venv/bin/python bench/reference_check_bench.py [CACHE_DIR] [--only SUBSTRING]   # default: the user's cache

Prints a table (seconds per model) and, per model and in all, the ratio of the check's added time
to the float64 pass measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import onnx

from matrix.reference.agreement import first_parting
from matrix.reference.float64_graph import float64_values
from matrix.reference.referee import referee_values
from matrix.sources.onnx_suites import typed_tensors
from matrix.store.cache import user_cache


def timed(work):
    start = time.perf_counter()
    result = work()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache_dir", nargs="?", default=user_cache(), type=Path)
    parser.add_argument("--only", default="", help="only artifact folders whose name holds this")
    args = parser.parse_args()
    folders = sorted(f for f in (args.cache_dir / "artifacts").glob("*") if (f / "case.json").is_file()
                     and args.only in f.name and json.loads((f / "case.json").read_text()).get("kind") != "suite")
    if not folders:
        raise SystemExit(f"no prepared case or ONNX-file artifacts under {args.cache_dir / 'artifacts'}: run trtmatrix first")
    print(f"{'artifact':44} {'nodes':>6} {'float64 pass s':>15} {'referee s':>10} {'agreement s':>12} {'added/pass':>11}")
    totals = [0.0, 0.0, 0.0]
    for folder in folders:
        model = onnx.load(str(folder / "model.onnx"))
        inputs = typed_tensors(folder / "inputs.npz")
        _, base = timed(lambda: float64_values(model, inputs, keep=False))
        theirs, referee = timed(lambda: referee_values(model, inputs).values)
        (parting, _), agreement = timed(lambda: first_parting(model, inputs, theirs))
        totals = [totals[0] + base, totals[1] + referee, totals[2] + agreement]
        print(f"{folder.name[:44]:44} {len(model.graph.node):>6} {base:>15.2f} {referee:>10.2f} {agreement:>12.2f} "
              f"{(referee + agreement) / base:>10.2f}×" + (f"  parts at {parting.node}" if parting else ""))
    print(f"{'all':44} {'':>6} {totals[0]:>15.2f} {totals[1]:>10.2f} {totals[2]:>12.2f} "
          f"{(totals[1] + totals[2]) / totals[0]:>10.2f}×")
    print(json.dumps({"models": len(folders), "float64_pass_s": round(totals[0], 2), "referee_s": round(totals[1], 2),
                      "agreement_s": round(totals[2], 2), "added_over_pass": round((totals[1] + totals[2]) / totals[0], 2)}))


if __name__ == "__main__":
    main()
