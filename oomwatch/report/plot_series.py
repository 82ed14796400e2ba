"""What the memory plot shows, read from the incident: the host timeline as stacked layers
relative to the kill, one point from the report when nothing was sampled, and the trainer's
device memory.  The drawing is `svg.py`'s; nothing here knows pixels or colours.

THP is part of anon and shmem part of file, so the layers split them out instead of adding
them on top (which would double-count).
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.diagnosis.evidence import limit_bytes, usage_bytes
from oomwatch.incident import Incident, TimelineSample, iso_epoch_s

# The stack, bottom-up: `split_layers` gives bytes in this order (svg.LAYERS colours them).
LAYER_NAMES = ("anon", "thp", "shmem", "page cache", "kernel")


@dataclass(frozen=True, slots=True)
class Point:
    t_s: float  # seconds relative to the kill (≤ 0)
    layers: tuple[float, ...]  # bytes per `LAYER_NAMES` entry
    usage: float
    limit: float | None


def split_layers(sample: TimelineSample) -> tuple[float, ...]:
    anon, file = sample.anon_bytes or 0, sample.file_bytes or 0
    thp, shmem = sample.thp_bytes or 0, sample.shmem_bytes or 0
    return (
        max(anon - thp, 0),
        min(thp, anon) if anon else thp,
        shmem,
        max(file - shmem, 0),
        sample.kernel_bytes or 0,
    )


def timeline_points(incident: Incident) -> list[Point]:
    timeline = incident.timeline
    if timeline is None or not timeline.samples:
        return []
    samples = sorted(timeline.samples, key=lambda s: s.t_seconds)
    end = samples[-1].t_seconds
    return [
        Point(s.t_seconds - end, split_layers(s), s.usage_bytes, s.limit_bytes) for s in samples
    ]


def point_at_kill(incident: Incident) -> Point | None:
    """One point from the report itself when nothing was sampled."""
    parts = incident.breakdown_bytes
    usage = usage_bytes(incident)
    if parts is None and usage is None:
        return None
    sample = TimelineSample(
        0.0,
        usage or 0,
        limit_bytes(incident),
        parts.anon if parts else None,
        parts.file if parts else None,
        parts.shmem if parts else None,
        parts.thp if parts else None,
        parts.kernel if parts else None,
    )
    layers = split_layers(sample)
    return Point(0.0, layers, float(usage or sum(layers)), sample.limit_bytes)


DEVICE_SERIES_NAMES = ("allocated", "reserved")
# The probe stamps the error, then samples the device while handling it (a real H100 run:
# 1.4 ms later); a sample this soon after the stamp is drawn at the error, not dropped.
AT_ERROR_SLACK_S = 1.0


def device_series(incident: Incident, end_s: float | None) -> dict[str, list[tuple[float, float]]]:
    """The trainer's device memory (CUDA allocator allocated/reserved, or TensorFlow's
    current bytes as allocated) over time relative to the kill, from the probe's samples
    (`device_samples`; records of older agents: the last sample only).

    The probe file is written by the workload, so every value is type-checked here.
    """
    series: dict[str, list[tuple[float, float]]] = {name: [] for name in DEVICE_SERIES_NAMES}
    alloc = incident.allocator or {}
    rows = alloc.get("device_samples")
    if not isinstance(rows, list):
        last = alloc.get("last_sample")
        cuda = last.get("cuda") if isinstance(last, dict) else None
        rows = [{**cuda, "wall_s": last.get("wall_s")}] if isinstance(cuda, dict) and last else []
    for row in rows:
        at = row.get("wall_s") if isinstance(row, dict) else None
        if end_s is None or not isinstance(at, int | float) or isinstance(at, bool):
            continue
        offset_s = float(at) - end_s
        if 0 < offset_s <= AT_ERROR_SLACK_S:
            offset_s = 0.0  # the probe's sample while handling the error is the error's
        for name in series:
            value = row.get(f"{name}_bytes")
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                series[name].append((offset_s, float(value)))
    return series


def device_total(incident: Incident) -> float | None:
    """The device's capacity where the OOM message gave it."""
    total = (incident.allocator or {}).get("total_bytes")
    if isinstance(total, int | float) and not isinstance(total, bool) and total > 0:
        return float(total)
    return None


def kill_wall_s(incident: Incident) -> float | None:
    """The kill's time on the wall clock: the last sample of the host timeline (the window
    ends at the kill), else the incident's time (a framework OOM has no host timeline)."""
    timeline = incident.timeline
    if timeline is not None and timeline.samples:
        return max(s.t_seconds for s in timeline.samples)
    return iso_epoch_s(incident.wall_time)
