"""Least-squares line through (time, bytes) points, with the numbers a forecast states.

One pass over the points, no numpy: the agent fits a few hundred points for the few
containers whose memory grows, never for every container every second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fit:
    """y = slope * t + intercept over `n` points spanning `span_s` seconds."""

    slope: float  # units per second
    intercept: float
    r2: float  # share of the variance the line explains (0 when y is flat)
    slope_se: float  # standard error of the slope (0 with fewer than 3 points)
    n: int
    span_s: float

    def at(self, t_s: float) -> float:
        return self.slope * t_s + self.intercept


def linear_fit(times_s: Sequence[float], values: Sequence[float]) -> Fit | None:
    """The least-squares line; None with fewer than two distinct times."""
    n = len(times_s)
    if n < 2:
        return None
    t0 = times_s[0]  # epoch seconds squared lose precision: fit on offsets
    ts = [t - t0 for t in times_s]
    mean_t = sum(ts) / n
    mean_y = sum(values) / n
    stt = sum((t - mean_t) ** 2 for t in ts)
    if stt == 0:
        return None
    syy = sum((y - mean_y) ** 2 for y in values)
    sty = sum((t - mean_t) * (y - mean_y) for t, y in zip(ts, values, strict=True))
    slope = sty / stt
    r2 = (sty * sty) / (stt * syy) if syy > 0 else 0.0
    residual = max(0.0, syy - slope * sty)
    slope_se = math.sqrt(residual / (n - 2) / stt) if n > 2 else 0.0
    intercept = mean_y - slope * mean_t - slope * t0
    return Fit(slope, intercept, r2, slope_se, n, ts[-1] - ts[0])
