"""A forecast in words: one line for the Event note, the log and the report (pure)."""

from __future__ import annotations

from oomwatch.diagnosis.evidence import duration
from oomwatch.forecast.model import Forecast, Growth
from oomwatch.units import fmt_bytes, fmt_rate


def growing_text(growing: tuple[Growth, ...]) -> str:
    """`anon 180 MiB +512 KiB/s, kernel 4 MiB +0 B/s` (the parts the kernel cannot
    reclaim), then the page cache it can."""
    held = [g for g in growing if not g.reclaimable]
    text = ", ".join(
        f"{g.part} {fmt_bytes(g.bytes)} {fmt_rate(g.bytes_per_second, signed=True)}" for g in held
    )
    cache = next((g for g in growing if g.reclaimable), None)
    if cache is not None:
        text += f"; page cache {fmt_bytes(cache.bytes)} (reclaimable, not counted)"
    return text


def describe(forecast: Forecast, where: str) -> str:
    """`container trainer will reach its 256 MiB memory limit in about 4m05s ...`."""
    f = forecast
    latest = duration(f.latest_s) if f.latest_s is not None else "never if it slows"
    pressure = f.pressure.describe() if f.pressure is not None else "not watched"
    return (
        f"{where} will reach its {fmt_bytes(f.limit_bytes)} memory limit in about"
        f" {duration(f.seconds_to_oom)} (between {duration(f.earliest_s)} and {latest}),"
        f" confidence {f.level} ({f.confidence:.2f}): memory the kernel cannot reclaim grew"
        f" steadily at {fmt_rate(f.slope_bytes_per_second)} for {f.window_seconds:.0f} s"
        f" (R² {f.r2:.2f}) to {fmt_bytes(f.unreclaimable_bytes)};"
        f" growing: {growing_text(f.growing)};"
        f" kernel pressure: {pressure}"
    )
