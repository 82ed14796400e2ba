"""Time to a container's memory limit: a pure function of its sampled timeline and pressure.

What the OOM killer answers is the memory the kernel cannot take back: anonymous memory and
shmem (Kubernetes nodes run without swap) and kernel memory.  Page cache is reclaimed before
anything is killed, so a container sitting at its limit with cache is in no danger: the
forecast follows `unreclaimable` usage, which leaves out `file` minus `shmem` (both cgroup
versions count shmem within `file`/`cache`; Documentation/admin-guide/cgroup-v2.rst).

A warning needs growth that is sustained, steady and new:
- sustained: seen for 90 s, longer than a garbage collector's cycle or a batch's rise (the
  first rise of a sawtooth is otherwise all a forecaster can see), so neither they nor a
  one-off spike qualify; a leak that fills its limit from nothing in under ~2.5 min is then
  warned less than a minute ahead, or not at all;
- steady: a straight line explains it (R²), both halves of the window grew at comparable
  rates, and it rose by a real share of the limit;
- new: after a drop (a collection, a freed buffer) growth counts only once memory passes the
  peak it came back from before.
The time to the limit is the headroom over the recent rate.  The confidence says how much
evidence backs it: how long the growth was seen against how far ahead it is extrapolated,
how straight it is, and whether the kernel reports reclaim pressure.  When the kernel says
reclaim is failing (v1 `critical`, PSI `full`), the cache is not being given back either,
and the headroom is counted from total usage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from oomwatch.forecast.fit import Fit, linear_fit
from oomwatch.incident import TimelineSample
from oomwatch.units import MIB, fmt_bytes

DEFAULT_HORIZON_S = 300.0
MIN_SAMPLES = 20
MIN_SUSTAINED_S = 90.0
WINDOWS_S = (90.0, 180.0, 360.0, 540.0)
WINDOW_COVER = 0.9  # a window counts when its samples span this share of it
MIN_R2 = 0.8
MAX_HALF_RATIO = 4.0  # the faster half of the window grew at most this much faster
MIN_RISE_SHARE = 0.02  # of the limit, over the window
MIN_RISE_BYTES = MIB
DROP_SHARE = 0.05  # a fall of this share of the limit below the running peak ends a cycle
NEW_PEAK_MARGIN_SHARE = 0.02
MIN_ENVELOPE_PEAKS = 3
FAR_EXTRAPOLATION = 5.0  # a time to the limit beyond 5x the growth seen lowers confidence
PSI_SOME_PRESSURE = 5.0  # percent (avg10) of time some task stalled on memory
PSI_FULL_FAILING = 10.0  # percent (avg10) of time all tasks stalled: reclaim is failing
MEDIUM, HIGH = 0.5, 0.7


@dataclass(frozen=True, slots=True)
class Pressure:
    """The kernel's word on reclaim in the container (and the node) lately."""

    medium: int = 0  # v1 memory.pressure_level notifications at medium or worse
    critical: int = 0  # ... at critical
    psi_events: int = 0  # v2: PSI trigger events on the container's memory.pressure
    some_avg10: float | None = None  # v2 container PSI, percent of the last 10 s
    full_avg10: float | None = None
    node_some_avg10: float | None = None  # /proc/pressure/memory
    node_full_avg10: float | None = None

    @property
    def reclaim_failing(self) -> bool:
        return self.critical > 0 or (self.full_avg10 or 0.0) >= PSI_FULL_FAILING

    @property
    def reported(self) -> bool:
        """The container itself is under reclaim pressure (node-wide figures do not count)."""
        return (
            self.medium > 0
            or self.psi_events > 0
            or (self.some_avg10 or 0.0) >= PSI_SOME_PRESSURE
            or self.reclaim_failing
        )

    def describe(self) -> str:
        parts: list[str] = []
        if self.critical or self.medium:
            parts.append(f"pressure_level critical {self.critical}x, medium {self.medium}x")
        if self.psi_events:
            parts.append(f"PSI trigger {self.psi_events}x")
        if self.some_avg10 is not None:
            parts.append(f"PSI some {self.some_avg10:.1f}% full {self.full_avg10 or 0.0:.1f}%")
        if self.node_some_avg10 is not None:
            parts.append(f"node PSI some {self.node_some_avg10:.1f}%")
        return ", ".join(parts) or "none reported"


@dataclass(frozen=True, slots=True)
class Growth:
    """One part of the container's memory over the forecast's window."""

    part: str  # anon, shmem, kernel, page cache
    bytes: int  # at the last sample
    bytes_per_second: float
    reclaimable: bool = False


@dataclass(frozen=True, slots=True)
class Forecast:
    """A predicted kill: when, how sure, and what is growing."""

    at_s: float  # wall clock of the last sample
    seconds_to_oom: float
    earliest_s: float  # the range the slope's uncertainty (2 standard errors) allows
    latest_s: float | None  # None: the slope's lower bound does not reach the limit
    limit_bytes: int
    usage_bytes: int
    unreclaimable_bytes: int
    slope_bytes_per_second: float
    window_seconds: float
    r2: float
    confidence: float
    growing: tuple[Growth, ...]
    pressure: Pressure | None = None

    @property
    def level(self) -> str:
        if self.confidence >= HIGH:
            return "high"
        return "medium" if self.confidence >= MEDIUM else "low"


@dataclass(frozen=True, slots=True)
class Outlook:
    """The forecast for one container now, or why there is none (`reason`)."""

    forecast: Forecast | None
    reason: str

    def warns(self, horizon_s: float = DEFAULT_HORIZON_S) -> bool:
        """A kill is predicted within the horizon with at least medium confidence."""
        f = self.forecast
        return f is not None and f.seconds_to_oom <= horizon_s and f.confidence >= MEDIUM


def unreclaimable_bytes(sample: TimelineSample) -> int:
    """Usage less the page cache the kernel can drop (file pages that are not shmem)."""
    cache = max(0, (sample.file_bytes or 0) - (sample.shmem_bytes or 0))
    return max(0, sample.usage_bytes - cache)


def outlook(samples: Sequence[TimelineSample], pressure: Pressure | None = None) -> Outlook:
    """The forecast over `samples` (oldest first, about one a second) and the pressure."""
    if not samples:
        return Outlook(None, "no samples")
    last = samples[-1]
    limit = last.limit_bytes
    if not limit or limit <= 0:
        return Outlook(None, "no memory limit")
    ts = [s.t_seconds for s in samples]
    ys = [float(unreclaimable_bytes(s)) for s in samples]
    start, peaks = _cycles(ts, ys, DROP_SHARE * limit)
    earlier = max((p for _, p in peaks), default=None)
    if earlier is not None and ys[-1] < earlier + NEW_PEAK_MARGIN_SHARE * limit:
        reason = f"below the {fmt_bytes(earlier)} peak it came back from before"
    else:
        current = _current_cycle(samples, ts, ys, start, limit, pressure)
        if current.forecast is not None:
            return current
        reason = current.reason
    envelope = _envelope(samples, peaks, limit, pressure)
    return envelope if envelope is not None else Outlook(None, reason)


def _current_cycle(
    samples: Sequence[TimelineSample],
    ts: Sequence[float],
    ys: Sequence[float],
    start: int,
    limit: int,
    pressure: Pressure | None,
) -> Outlook:
    """The forecast from the growth since the last drop, over the longest window of it that
    qualifies (its recent half gives the rate)."""
    chosen: tuple[int, Fit, Fit] | None = None
    reason = "not growing"
    for window_s in WINDOWS_S:
        first = _first_at(ts, ts[-1] - window_s, start)
        judged = _judge(ts[first:], ys[first:], window_s, limit)
        if not isinstance(judged, str):
            chosen = (first, *judged)
        elif window_s == WINDOWS_S[0]:
            reason = judged
    if chosen is None:
        return Outlook(None, reason)
    first, whole, recent = chosen
    return _forecast(samples[first:], whole, recent, pressure, "grew steadily")


def _envelope(
    samples: Sequence[TimelineSample],
    peaks: Sequence[tuple[float, float]],
    limit: int,
    pressure: Pressure | None,
) -> Outlook | None:
    """A leak under a sawtooth: the peaks of the cycles it came back from rise steadily
    (at least three, over a minute or more), so one of the next peaks reaches the limit."""
    if len(peaks) < MIN_ENVELOPE_PEAKS:
        return None
    fit = linear_fit([t for t, _ in peaks], [p for _, p in peaks])
    if fit is None or fit.span_s < MIN_SUSTAINED_S or fit.slope <= 0 or fit.r2 < MIN_R2:
        return None
    if fit.slope * fit.span_s < max(MIN_RISE_SHARE * limit, MIN_RISE_BYTES):
        return None
    first = _first_at([s.t_seconds for s in samples], peaks[0][0], 0)
    return _forecast(samples[first:], fit, fit, pressure, "peaked higher each cycle")


def _cycles(
    ts: Sequence[float], ys: Sequence[float], drop: float
) -> tuple[int, list[tuple[float, float]]]:
    """Where the current cycle began (after the last drop), and (time, level) of the peaks
    of the cycles before it, each followed by a drop (none: a cycle that never dropped)."""
    start, peak_at, peaks = 0, 0, []
    for i in range(1, len(ys)):
        y = ys[i]
        if y < ys[peak_at] - drop:
            peaks.append((ts[peak_at], ys[peak_at]))
            start = peak_at = i
        elif y > ys[peak_at]:
            peak_at = i
    return start, peaks


def _first_at(ts: Sequence[float], from_s: float, floor: int) -> int:
    i = floor
    while i < len(ts) - 1 and ts[i] < from_s:
        i += 1
    return i


def _judge(
    ts: Sequence[float], ys: Sequence[float], window_s: float, limit: int
) -> tuple[Fit, Fit] | str:
    """(whole window's fit, recent half's fit) when the growth qualifies, else why not."""
    span_s = ts[-1] - ts[0] if ts else 0.0
    if span_s < WINDOW_COVER * window_s or len(ts) < MIN_SAMPLES:
        return f"growth not sustained for {MIN_SUSTAINED_S:.0f} s yet ({span_s:.0f} s seen)"
    whole = linear_fit(ts, ys)
    mid = len(ts) // 2
    older, recent = linear_fit(ts[: mid + 1], ys[: mid + 1]), linear_fit(ts[mid:], ys[mid:])
    if whole is None or older is None or recent is None or whole.slope <= 0:
        return "not growing"
    if whole.slope * whole.span_s < max(MIN_RISE_SHARE * limit, MIN_RISE_BYTES):
        return f"rose only {fmt_bytes(whole.slope * whole.span_s)} in {span_s:.0f} s"
    if whole.r2 < MIN_R2:
        return f"growth irregular (R² {whole.r2:.2f} over {span_s:.0f} s)"
    low, high = sorted((older.slope, recent.slope))
    if low <= 0 or high > MAX_HALF_RATIO * low:
        return f"growth uneven over {span_s:.0f} s (a jump or a stop, not a steady rise)"
    return whole, recent


def _forecast(
    samples: Sequence[TimelineSample],
    whole: Fit,
    recent: Fit,
    pressure: Pressure | None,
    how: str,
) -> Outlook:
    last = samples[-1]
    limit = last.limit_bytes or 0
    level = max(0.0, recent.at(last.t_seconds))
    if pressure is not None and pressure.reclaim_failing:
        level = max(level, float(last.usage_bytes))
    headroom = max(0.0, limit - level)
    rate = recent.slope
    eta = headroom / rate
    fast, slow = rate + 2 * recent.slope_se, rate - 2 * recent.slope_se
    confidence = _confidence(whole, eta, pressure)
    forecast = Forecast(
        at_s=last.t_seconds,
        seconds_to_oom=eta,
        earliest_s=headroom / fast,
        latest_s=headroom / slow if slow > 0 else None,
        limit_bytes=limit,
        usage_bytes=last.usage_bytes,
        unreclaimable_bytes=unreclaimable_bytes(last),
        slope_bytes_per_second=rate,
        window_seconds=whole.span_s,
        r2=whole.r2,
        confidence=confidence,
        growing=_parts(samples),
        pressure=pressure,
    )
    return Outlook(forecast, f"{how} for {whole.span_s:.0f} s (R² {whole.r2:.2f})")


def _confidence(whole: Fit, eta_s: float, pressure: Pressure | None) -> float:
    """About 0.65 for 90 s of straight growth, 0.8 for three minutes, 0.9 from five; less for
    a crooked line or a long extrapolation; more when the kernel reports reclaim pressure."""
    seen = min(0.9, 0.45 + 0.15 * math.log2(max(whole.span_s, 1.0) / 30.0))
    straight = (whole.r2 - MIN_R2) / (1.0 - MIN_R2)
    score = seen * (0.85 + 0.15 * max(0.0, min(1.0, straight)))
    if eta_s > FAR_EXTRAPOLATION * whole.span_s:
        score *= 0.8
    if pressure is not None and pressure.reported:
        score += 0.1
    return round(min(0.99, max(0.0, score)), 3)


def _parts(samples: Sequence[TimelineSample]) -> tuple[Growth, ...]:
    """Each part's level and rate over the window, fastest growing first."""
    ts = [s.t_seconds for s in samples]
    columns: dict[str, list[float | None]] = {
        "anon": [s.anon_bytes for s in samples],
        "shmem": [s.shmem_bytes for s in samples],
        "kernel": [_kernel(s) for s in samples],
        "page cache": [
            None if s.file_bytes is None else max(0, s.file_bytes - (s.shmem_bytes or 0))
            for s in samples
        ],
    }
    out: list[Growth] = []
    for part, values in columns.items():
        known = [(t, v) for t, v in zip(ts, values, strict=True) if v is not None]
        fit = linear_fit([t for t, _ in known], [float(v) for _, v in known])
        if fit is not None and known[-1][1] > 0:
            out.append(Growth(part, int(known[-1][1]), fit.slope, part == "page cache"))
    return tuple(sorted(out, key=lambda g: -g.bytes_per_second))


def _kernel(sample: TimelineSample) -> float | None:
    """v2 prints kernel memory; on v1 it is what usage holds beyond anon and cache."""
    if sample.kernel_bytes is not None:
        return sample.kernel_bytes
    if sample.anon_bytes is None or sample.file_bytes is None:
        return None
    return max(0, sample.usage_bytes - sample.anon_bytes - sample.file_bytes)
