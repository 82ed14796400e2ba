"""Axis ticks for the memory plot: round steps (1, 2 or 5 × 10^n) in the unit the span
reads best in, bytes in binary units and time before the kill in s, min or h."""

from __future__ import annotations

import math

from oomwatch.units import BINARY_UNITS

_TIME_UNITS = (("s", 1.0, 180.0), ("min", 60.0, 3 * 3600.0), ("h", 3600.0, math.inf))


def nice_step(span: float, ticks: int) -> float:
    """The 1, 2 or 5 × 10^n step that cuts `span` into at most about `ticks` parts."""
    raw = max(span, 1e-9) / ticks
    magnitude = 10.0 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if raw <= m * magnitude * (1 + 1e-9))


def _number(value: float) -> str:
    return f"{value:.10g}"


def byte_ticks(top_bytes: float, ticks: int = 4) -> tuple[float, list[tuple[float, str]]]:
    """(axis top, [(bytes, label)]): round steps in the largest binary unit below the top."""
    unit, size = next((u, s) for u, s in reversed(BINARY_UNITS) if top_bytes >= s or s == 1)
    step = nice_step(top_bytes / size, ticks)
    step = max(step, 1.0) if unit == "B" else step
    count = max(math.ceil(top_bytes / size / step - 1e-9), 1)
    marks = [(i * step * size, f"{_number(i * step)} {unit}") for i in range(count + 1)]
    return count * step * size, [(0.0, "0"), *marks[1:]]


def time_ticks(span_s: float, ticks: int = 5) -> tuple[float, list[tuple[float, str]]]:
    """(axis start ≤ 0, [(seconds, label)]) before the kill, in s, min or h by the span."""
    unit, size = next((u, s) for u, s, upto in _TIME_UNITS if span_s <= upto)
    step = nice_step(span_s / size, ticks)
    count = max(math.ceil(span_s / size / step - 1e-9), 1)
    marks = [(-i * step * size, f"-{_number(i * step)} {unit}") for i in range(count, 0, -1)]
    return -count * step * size, [*marks, (0.0, "0")]
