"""Findings over time: steady growth (a leak: a larger limit only delays the next kill), a
jump just before the kill, and the same container killed again and again.
"""

from __future__ import annotations

from collections.abc import Sequence

from oomwatch.diagnosis.evidence import limit_bytes, own_usage_bytes, where
from oomwatch.incident import Finding, Incident, Timeline, TimelineSample, iso_epoch_s
from oomwatch.units import fmt_bytes

LEAK_MIN_SAMPLES = 10
LEAK_MIN_SPAN_S = 30.0
LEAK_MIN_R2 = 0.8
LEAK_MIN_GROWTH_SHARE = 0.2  # growth over the window, as a share of usage at the end
SPIKE_WINDOW_S = 10.0
SPIKE_MIN_SHARE_OF_LIMIT = 0.25
SPIKE_MIN_SHARE_OF_RISE = 0.6
CRASH_LOOP_WINDOW_S = 3600.0
CRASH_LOOP_MIN_KILLS = 3


def _fit(samples: Sequence[TimelineSample]) -> tuple[float, float]:
    """Least-squares slope (bytes/s) and R² of usage over time."""
    n = len(samples)
    ts = [s.t_seconds for s in samples]
    ys = [float(s.usage_bytes) for s in samples]
    mt, my = sum(ts) / n, sum(ys) / n
    stt = sum((t - mt) ** 2 for t in ts)
    syy = sum((y - my) ** 2 for y in ys)
    if stt == 0 or syy == 0:
        return 0.0, 0.0
    sty = sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True))
    slope = sty / stt
    return slope, (sty * sty) / (stt * syy)


def _limit(timeline: Timeline, incident: Incident) -> int | None:
    limits = [s.limit_bytes for s in timeline.samples if s.limit_bytes]
    return limits[-1] if limits else limit_bytes(incident)


def _leak_fit(timeline: Timeline | None) -> tuple[float, float, float] | None:
    """(slope bytes/s, R², span s) when the window shows steady growth, else None."""
    if timeline is None or len(timeline.samples) < LEAK_MIN_SAMPLES:
        return None
    samples = timeline.samples
    span = samples[-1].t_seconds - samples[0].t_seconds
    if span < LEAK_MIN_SPAN_S:
        return None
    slope, r2 = _fit(samples)
    end = max(samples[-1].usage_bytes, 1)
    if slope <= 0 or r2 < LEAK_MIN_R2 or slope * span < LEAK_MIN_GROWTH_SHARE * end:
        return None
    return slope, r2, span


def leak_trend(incident: Incident) -> Finding | None:
    fit = _leak_fit(incident.timeline)
    if fit is None or incident.timeline is None:
        return None
    slope, r2, span = fit
    samples = incident.timeline.samples
    first, last = samples[0].usage_bytes, samples[-1].usage_bytes
    limit = _limit(incident.timeline, incident)
    fill = f"; at that rate it fills the {fmt_bytes(limit)} limit from {fmt_bytes(first)} in"
    fill = f"{fill} {(limit - first) / slope:.0f} s" if limit and limit > first else ""
    message = (
        f"Memory of {where(incident)} grew steadily at {fmt_bytes(slope)}/s over the last"
        f" {span:.0f} s (R² {r2:.2f}), from {fmt_bytes(first)} to {fmt_bytes(last)}{fill}:"
        " a leak or unbounded growth, which a larger limit only postpones."
    )
    evidence = {
        "slope_bytes_per_second": slope,
        "r2": r2,
        "window_seconds": span,
        "samples": len(samples),
        "first_usage_bytes": first,
        "last_usage_bytes": last,
        "limit_bytes": limit,
        "seconds_to_limit": (limit - first) / slope if limit and limit > first else None,
    }
    return Finding("leak-trend", "critical", message, evidence)


def spike(incident: Incident) -> Finding | None:
    """Most of the window's rise came in its last seconds, and it is big against the limit."""
    timeline = incident.timeline
    if timeline is None or len(timeline.samples) < 3:
        return None
    samples = timeline.samples
    end_t = samples[-1].t_seconds
    before = [s for s in samples if s.t_seconds < end_t - SPIKE_WINDOW_S]
    if not before:
        return None
    sampled_end = timeline.usage_at_kill_bytes or samples[-1].usage_bytes
    end = max(sampled_end, own_usage_bytes(incident) or 0)  # a burst between two samples
    base = before[-1].usage_bytes
    low = min(s.usage_bytes for s in samples)
    jump, rise = end - base, end - low
    limit = _limit(timeline, incident) or end
    if jump < SPIKE_MIN_SHARE_OF_LIMIT * limit or jump < SPIKE_MIN_SHARE_OF_RISE * rise:
        return None
    # The probe's phase is the pod's text: evidence, never words of the verdict.
    phase = (incident.allocator or {}).get("phase")
    message = (
        f"Memory of {where(incident)} jumped by {fmt_bytes(jump)} (from {fmt_bytes(base)} to"
        f" {fmt_bytes(end)}) in the last {SPIKE_WINDOW_S:.0f} s before the kill: one"
        " burst (a large batch, a file loaded whole, a burst of requests) rather than growth."
    )
    evidence = {
        "jump_bytes": jump,
        "window_seconds": SPIKE_WINDOW_S,
        "base_usage_bytes": base,
        "usage_at_kill_bytes": end,
        "last_sampled_usage_bytes": sampled_end,
        "limit_bytes": limit,
        "phase": phase,
    }
    return Finding("spike", "warning", message, evidence)


def workload_key(incident: Incident) -> tuple[str, ...] | None:
    """What stays the same across restarts of one container (its container id does not)."""
    ctx = incident.k8s
    if incident.pod_uid and ctx is not None and ctx.container:
        return ("k8s", incident.pod_uid, ctx.container)
    if incident.pod_uid and incident.victim is not None:
        return ("pod", incident.pod_uid, incident.victim.comm)
    path = incident.task_memcg or incident.oom_memcg
    return ("cgroup", path) if path else None


def incident_time_s(incident: Incident) -> float | None:
    """Wall clock in epoch seconds when known (kernel time only compares within one boot)."""
    wall_s = iso_epoch_s(incident.wall_time)
    return wall_s if wall_s is not None else incident.kernel_time_s


def crash_loop(incident: Incident, history: Sequence[Incident]) -> Finding | None:
    """The same container killed again and again (history: earlier incidents, any order)."""
    key, now = workload_key(incident), incident_time_s(incident)
    if key is None or now is None:
        return None
    times = sorted(
        t
        for other in history
        if other is not incident
        and workload_key(other) == key
        and (t := incident_time_s(other)) is not None
        and now - CRASH_LOOP_WINDOW_S <= t <= now
    )
    kills = len(times) + 1
    ctx = incident.k8s
    restarts = ctx.restart_count if ctx and ctx.last_termination_reason == "OOMKilled" else None
    if kills < CRASH_LOOP_MIN_KILLS and (restarts or 0) < CRASH_LOOP_MIN_KILLS:
        return None
    span = now - times[0] if times else 0.0
    within = f"in {span:.0f} s" if span >= 1 else "within a second"
    counted = f"{kills} kills {within}" if kills >= CRASH_LOOP_MIN_KILLS else ""
    if restarts:
        counted += (", " if counted else "") + f"{restarts} restarts after OOMKilled"
    message = (
        f"{where(incident)} keeps being OOM-killed ({counted}) at the same limit: restarts and"
        " retries start over and hit it again; fix the limit or the growth."
    )
    evidence = {
        "kills_in_window": kills,
        "window_seconds": CRASH_LOOP_WINDOW_S,
        "first_kill_s": times[0] if times else now,
        "restart_count": restarts,
        "key": list(key),
    }
    return Finding("crash-loop", "critical", message, evidence)
