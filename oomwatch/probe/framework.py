"""The framework-OOM source: each CUDA/TensorFlow OOM a probe recorded, once, at a bounded rate.

Any pod that can write the probe directory can fill it with OOM events (45 files x 256 events
made 11,520 incidents, pushed a kernel kill out of the store and delayed the next one by
seconds: issue 14).  So events pass a token bucket per source, the file's owner uid (which the
kernel sets, not the writer), and one for the whole node; what the buckets refuse is counted
and logged, never queued.  Kernel kills do not pass through here and are never delayed by it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

from oomwatch.incident import Incident
from oomwatch.probe.join import CONTRADICTED, WarnOnce, claims_consistent, framework_incident
from oomwatch.probe.reader import FlightRecord, ProbeDirReader, ReaderLimits
from oomwatch.probe.schema import FrameworkOomEvent
from oomwatch.sanitize import escape_control

log = logging.getLogger("oomwatch.probe.framework")

SOURCE_BURST = 10  # framework OOMs one owner may report at once
SOURCE_EVERY_S = 60.0  # then one per minute
NODE_BURST = 60  # all owners together
NODE_EVERY_S = 5.0
MAX_SOURCES = 4096  # buckets kept (full, idle ones go first)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float


class RateLimit:
    """Token buckets: `burst` at once, then one per `every_s`, per key and for all keys."""

    def __init__(
        self,
        burst: int = SOURCE_BURST,
        every_s: float = SOURCE_EVERY_S,
        total_burst: int = NODE_BURST,
        total_every_s: float = NODE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst, self._every_s = burst, every_s
        self._clock = clock
        self._keys: dict[Hashable, _Bucket] = {}
        self._total = _Bucket(float(total_burst), clock())
        self._total_burst, self._total_every_s = total_burst, total_every_s

    def allow(self, key: Hashable) -> bool:
        now = self._clock()
        bucket = self._keys.get(key)
        if bucket is None:
            if len(self._keys) >= MAX_SOURCES:
                self._forget_full(now)
            bucket = self._keys[key] = _Bucket(float(self._burst), now)
        _refill(bucket, now, self._burst, self._every_s)
        _refill(self._total, now, self._total_burst, self._total_every_s)
        if bucket.tokens < 1 or self._total.tokens < 1:
            return False
        bucket.tokens -= 1
        self._total.tokens -= 1
        return True

    def _forget_full(self, now: float) -> None:
        for key, bucket in list(self._keys.items()):
            _refill(bucket, now, self._burst, self._every_s)
            if bucket.tokens >= self._burst:
                del self._keys[key]
        while len(self._keys) >= MAX_SOURCES:  # all busy: the oldest entry goes
            del self._keys[next(iter(self._keys))]


def _refill(bucket: _Bucket, now: float, burst: int, every_s: float) -> None:
    bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at_s) / every_s)
    bucket.at_s = now


EventKey = tuple[int | None, str | None, int | None, int, float, int]


def event_key(record: FlightRecord, event: FrameworkOomEvent) -> EventKey:
    """What no other process can repeat: the writer's owner, boot, pid namespace, pid and
    start time, and the event's sequence number in its file (a restarted process is a new
    pid or start time; a renamed file keeps all of these)."""
    meta = record.meta
    return (record.owner_uid, meta.boot_id, meta.pid_ns, meta.pid, meta.started_mono_s,
            event.seq)  # fmt: skip


# Ranks of one launch that run out within this long of the first are one incident: torchrun
# SIGTERMs the others when one fails, but ranks fed the same batch shapes often all run out.
JOB_WINDOW_S = 3.0
JobKey = tuple[int | None, str | None, str]


def job_key(record: FlightRecord) -> JobKey | None:
    """Which distributed launch wrote the record (owner, boot, launch), None outside one."""
    meta = record.meta
    if meta.job_id is None or meta.world_size is None or meta.world_size < 2:
        return None
    return (record.owner_uid, meta.boot_id, meta.job_id)


@dataclass(slots=True)
class _Launch:
    """Framework OOMs of one distributed launch, held until its window has passed."""

    first_seen_s: float
    events: dict[EventKey, tuple[FlightRecord, FrameworkOomEvent]]


class FrameworkOomSource:
    """Reports each framework OOM recorded in the probe directory once (per daemon run).

    An event is known by the process that wrote it (`event_key`), not by the file's name: a
    restarted container's probe renames the previous run's file to `.prev.ring`, and the
    same events under a new name are not new.  After a daemon restart the same events come
    again; the store drops them, since the incident's store key is built from the same
    (oomwatch.store_keys).  The OOMs of the ranks of one distributed launch (`job_key`)
    wait `JOB_WINDOW_S` and become one incident: the first rank's, naming the others.
    `pod_dirs`: the deployment enforces per-pod directories (oomwatch.probe.identity).
    """

    def __init__(
        self,
        probe_dir: Path,
        *,
        limits: ReaderLimits | None = None,
        reader: ProbeDirReader | None = None,
        pod_dirs: bool = False,
        rate: RateLimit | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader = reader or ProbeDirReader(probe_dir, limits)
        self._pod_dirs = pod_dirs
        self._rate = rate or RateLimit()
        self._clock = clock
        self._seen: set[EventKey] = set()
        self._launches: dict[JobKey, _Launch] = {}
        self._warn = WarnOnce()
        self.suppressed = 0

    def poll(self, now_wall_s: float | None = None) -> list[Incident]:
        now = time.time() if now_wall_s is None else now_wall_s
        now_s = self._clock()
        out: list[Incident] = []
        present: set[EventKey] = set()
        suppressed: Counter[int | None] = Counter()
        for record in self._reader.read_all(now):
            if not record.events:
                continue
            if not claims_consistent(record):
                self._warn(record, CONTRADICTED)
                continue
            job = job_key(record)
            for event in record.events:
                key = event_key(record, event)
                present.add(key)
                if key in self._seen:
                    continue
                if job is not None:
                    launch = self._launches.setdefault(job, _Launch(now_s, {}))
                    launch.events[key] = (record, event)
                elif self._rate.allow(record.owner_uid):
                    out.append(framework_incident(record, event, now, self._pod_dirs))
                else:
                    suppressed[record.owner_uid] += 1
        waiting: set[EventKey] = set()
        for job, launch in list(self._launches.items()):
            if now_s - launch.first_seen_s < JOB_WINDOW_S:
                waiting.update(launch.events)
                continue
            del self._launches[job]
            first_record = min(launch.events.values(), key=lambda item: item[1].mono_s)[0]
            if self._rate.allow(first_record.owner_uid):
                out.append(launch_incident(list(launch.events.values()), now, self._pod_dirs))
            else:
                suppressed[first_record.owner_uid] += 1
        # Files gone or refused are forgotten (the set stays bounded); held ones are not seen.
        self._seen = present - waiting
        if suppressed:
            self.suppressed += sum(suppressed.values())
            log.warning("framework_ooms_rate_limited", extra={
                "not_recorded": {str(uid): n for uid, n in suppressed.most_common(5)},
            })  # fmt: skip
        return out

    def close(self) -> None:
        self._reader.close()


def launch_incident(
    events: list[tuple[FlightRecord, FrameworkOomEvent]], now_wall_s: float, pod_dirs: bool
) -> Incident:
    """One incident for the OOMs of one launch's ranks: the first to run out speaks (its
    store key is its own event's, so a restarted agent regroups to the same incident), the
    others are listed under `allocator.ranks`, in the order they ran out."""
    ordered = sorted(events, key=lambda item: item[1].mono_s)
    record, first = ordered[0]
    incident = framework_incident(record, first, now_wall_s, pod_dirs)
    if incident.allocator is not None:
        incident.allocator["ranks"] = [
            {"rank": r.meta.rank, "local_rank": r.meta.local_rank,
             "device": None if e.device is None else escape_control(e.device),
             "after_s": round(e.mono_s - first.mono_s, 3)}
            for r, e in ordered
        ]  # fmt: skip
    return incident
