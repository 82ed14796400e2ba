"""A forecast in words: one line for the Event note, the log and the report (pure)."""

from __future__ import annotations

from oomwatch.diagnosis.evidence import duration
from oomwatch.forecast.model import Forecast, Growth

MIB = 1 << 20


def size(value: float) -> str:
    return f"{value / 2**30:.1f}GiB" if abs(value) >= 2**30 else f"{value / MIB:.1f}MiB"


def growing_text(growing: tuple[Growth, ...]) -> str:
    """`anon 180.0MiB +0.50MiB/s, kernel 4.0MiB +0.00MiB/s` (the parts the kernel cannot
    reclaim), then the page cache it can."""
    held = [g for g in growing if not g.reclaimable]
    text = ", ".join(f"{g.part} {size(g.bytes)} {g.bytes_per_second / MIB:+.2f}MiB/s" for g in held)
    cache = next((g for g in growing if g.reclaimable), None)
    if cache is not None:
        text += f"; page cache {size(cache.bytes)} (reclaimable, not counted)"
    return text


def describe(forecast: Forecast, where: str) -> str:
    """`container trainer will reach its 256.0MiB memory limit in about 4m05s ...`."""
    f = forecast
    latest = duration(f.latest_s) if f.latest_s is not None else "never if it slows"
    pressure = f.pressure.describe() if f.pressure is not None else "not watched"
    return (
        f"{where} will reach its {size(f.limit_bytes)} memory limit in about"
        f" {duration(f.seconds_to_oom)} (between {duration(f.earliest_s)} and {latest}),"
        f" confidence {f.level} ({f.confidence:.2f}): memory the kernel cannot reclaim grew"
        f" steadily at {f.slope_bytes_per_second / MIB:.2f}MiB/s for {f.window_seconds:.0f} s"
        f" (R² {f.r2:.2f}) to {size(f.unreclaimable_bytes)}; growing: {growing_text(f.growing)};"
        f" kernel pressure: {pressure}"
    )
