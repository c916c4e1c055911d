"""The log-scale y axis of the report's small error plots (errors span many decades)."""

from __future__ import annotations

import math
from typing import Callable


def log_axis(values: list[float], top: float, span: float) -> tuple[Callable[[float], float], list[dict]]:
    """A mapping from a positive value to its y (from `top`, `span` pixels for the whole decade
    range of `values`; 1e-12 at the lowest), and a tick per decade."""
    low = math.floor(math.log10(max(min(values), 1e-12)))
    high = max(math.ceil(math.log10(max(values))), low + 1)

    def y(value: float) -> float:
        return round(top + (high - math.log10(max(value, 10.0 ** low))) / (high - low) * span, 1)

    return y, [{"y": y(10.0 ** p), "label": f"1e{p}"} for p in range(low, high + 1)]
