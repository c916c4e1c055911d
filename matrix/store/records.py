"""One record per cell: the row format of results.parquet / results.jsonl (docs/outputs.md)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

COLUMNS = [
    "run_id", "cell_id", "row_id", "case", "suite", "params", "profile", "precision", "env", "engine", "env_version",
    "engine_version", "status", "verdict", "known_issue", "reported", "pattern_unchecked", "max_abs", "max_rel", "mean_abs", "rmse", "cosine",
    "mismatch_frac", "nan_count", "inf_count", "ref_nonfinite", "mask", "left_out", "nonfinite_found", "wrong_shape", "extra_outputs", "drift_max_abs", "drift_run", "runs", "atol", "rtol",
    "atol_needed", "rtol_needed", "rule", "top1", "worst_slice", "reference", "reference_check", "conversion_max_abs",
    "copy_max_abs", "shape_profile", "build_s",
    "infer_ms", "infer_ms_runs", "engine_bytes", "network_layers", "build_log", "error",
    "log_tail", "graph_warnings", "model_checks", "operators", "fp16_forecast", "precision_ran", "precision_check", "layer_precisions", "host", "node", "device", "gpu", "gpu_index", "compute_capability", "driver_version", "cuda_version", "cudnn_version", "python_version", "image", "image_digest",
    "content_key", "case_key", "reused", "artifact", "outputs", "faults", "fault_observed",
]
# Taken as they are from the worker's result.json and the backend's facts about the environment.
REPORTED = ["error", "node", "engine_version", "python_version", "device", "gpu", "gpu_index", "compute_capability", "driver_version",
            "cuda_version", "cudnn_version",
            "build_s", "infer_ms", "runs", "image", "image_digest"]
LOG_TAIL_LINES = 40
HOST = socket.gethostname()


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def log_tail(path: Path) -> str:
    """The end of a cell's log, without the colour codes engines put in their own logging."""
    try:
        lines = ANSI_ESCAPE.sub("", path.read_text(errors="replace")).splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


def storable(text: str) -> str:
    """Text every file format holds: a lone surrogate (a file name's undecodable byte, as Python's
    surrogateescape keeps it, in an error message) written as its escape, not a UnicodeEncodeError
    that loses the whole run's tables."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def empty_record(**fields) -> dict:
    record = dict.fromkeys(COLUMNS)
    record.update(host=HOST, reused=False, outputs="[]")
    record.update(fields)
    return record
