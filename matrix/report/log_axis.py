"""The y axis of the report's small error plots: errors span many decades (log scale), and exact
zeros and NaN/Inf get rows of their own below and above the decades, so that none is dropped or
read as a number."""

from __future__ import annotations

import math
from typing import Callable

EDGE_ROW = 14  # pixels for the "0" and "NaN/Inf" rows
MAX_TICKS = 7  # decade labels beyond this are thinned


def error_axis(values: list, top: float, span: float) -> tuple[Callable[[float], float], list[dict]]:
    """A mapping from an error (a number ≥ 0, or inf) to its y, from `top` over `span` pixels,
    and its ticks. The decades cover the positive finite `values` (1e-12 at the lowest)."""
    positive = [v for v in values if 0 < v < math.inf] or [1.0]
    inf_row = EDGE_ROW if any(v == math.inf for v in values) else 0
    zero_row = EDGE_ROW if any(v == 0 for v in values) else 0
    decades = span - inf_row - zero_row
    low = math.floor(math.log10(max(min(positive), 1e-12)))
    high = max(math.ceil(math.log10(max(positive))), low + 1)

    def y(value: float) -> float:
        if value == math.inf:
            return top
        if value == 0:
            return top + span
        return round(top + inf_row + (high - math.log10(max(value, 10.0 ** low))) / (high - low) * decades, 1)

    stride = math.ceil((high - low + 1) / MAX_TICKS)
    ticks = [{"y": y(10.0 ** p), "label": f"1e{p}"} for p in range(high, low - 1, -stride)]
    ticks += [{"y": top, "label": "NaN/Inf"}] * bool(inf_row) + [{"y": top + span, "label": "0"}] * bool(zero_row)
    return y, ticks
