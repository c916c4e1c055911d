"""look-at.txt in each run folder: every cell worth a look and every refusal, one tab-separated
line each (status, cell id, worst error, drift, first line of its message), for grep and for the
reader the terminal gave groups to."""

from __future__ import annotations

import pandas as pd

from ..statuses import BY_CAUSE, ONE_BY_ONE
from .error_text import drift_text, one_line, worst_error

LOOK_AT = "look-at.txt"


def look_at_text(frame: pd.DataFrame) -> str:
    """Failures, crashes, timeouts, xpass and drift first, then errors, then refusals."""
    wanted = frame["status"].isin(ONE_BY_ONE + BY_CAUSE) | frame["drift_max_abs"].fillna(0).gt(0)
    order = {status: i for i, status in enumerate(ONE_BY_ONE + BY_CAUSE)}
    picked = frame[wanted]
    picked = picked.assign(_o=picked["status"].map(order).fillna(0)).sort_values("_o", kind="stable")
    lines = ["# status\tcell_id\tworst error\tdrift\tmessage (first line)"]
    for _, r in picked.iterrows():
        message = one_line(r["error"]) if isinstance(r["error"], str) and r["error"].strip() else None
        lines.append("\t".join([r["status"], r["cell_id"], *(d or "" for d in (worst_error(r), drift_text(r), message))]))
    return "".join(line + "\n" for line in lines)
