"""The framework-OOM source: each CUDA/TensorFlow OOM a probe recorded, once, at a bounded rate.

Any pod that can write the probe directory can fill it with OOM events (45 files x 256 events
made 11,520 incidents, pushed a kernel kill out of the store and delayed the next one by
seconds).  So events pass a token bucket per source and one for the node.  A source
is the vouched pod directory where per-pod directories are enforced, else the file's owner
uid; vouched sources have a node budget of their own, so no number of unvouched owners (100
uids drained a shared one) starves a real trainer's directory.  An event a bucket
refuses is counted, summarised in one log line per poll, and tried again on the next poll
(it stays in its file), never marked seen.  Kernel kills do not pass through here.
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
from oomwatch.probe.reader import FlightRecord, ProbeDirReader, ReaderLimits, RecordSource
from oomwatch.probe.schema import FrameworkOomEvent
from oomwatch.sanitize import escape_control

log = logging.getLogger("oomwatch.probe.framework")

SOURCE_BURST = 10  # framework OOMs one owner may report at once
SOURCE_EVERY_S = 60.0  # then one per minute
NODE_BURST = 60  # all vouched sources together
NODE_EVERY_S = 5.0
UNVOUCHED_BURST = 20  # all unvouched sources together (a budget apart from the vouched)
UNVOUCHED_EVERY_S = 15.0
SUMMARY_EVERY_S = 60.0  # the summary of waiting events, when nothing new was refused
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
        self._unvouched = _Bucket(float(UNVOUCHED_BURST), clock())

    def allow(self, key: Hashable, vouched: bool = True) -> bool:
        """One event of `key`'s, drawn from the vouched or the unvouched node budget."""
        now = self._clock()
        bucket = self._keys.get(key)
        if bucket is None:
            if len(self._keys) >= MAX_SOURCES:
                self._forget_full(now)
            bucket = self._keys[key] = _Bucket(float(self._burst), now)
        _refill(bucket, now, self._burst, self._every_s)
        if vouched:
            node, burst, every_s = self._total, self._total_burst, self._total_every_s
        else:
            node, burst, every_s = self._unvouched, UNVOUCHED_BURST, UNVOUCHED_EVERY_S
        _refill(node, now, burst, every_s)
        if bucket.tokens < 1 or node.tokens < 1:
            return False
        bucket.tokens -= 1
        node.tokens -= 1
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
    return (record.owner_uid, meta.boot_id, meta.pid_ns, meta.pid, meta.started_mono_s, event.seq)


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
    (oomwatch.store.keys).  The OOMs of the ranks of one distributed launch (`job_key`)
    wait `JOB_WINDOW_S` and become one incident: the first rank's, naming the others.
    `pod_dirs`: the deployment enforces per-pod directories (oomwatch.probe.identity).
    """

    def __init__(
        self,
        probe_dir: Path,
        *,
        limits: ReaderLimits | None = None,
        reader: RecordSource | None = None,
        pod_dirs: bool = False,
        rate: RateLimit | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader = reader or ProbeDirReader(probe_dir, limits)
        self._pod_dirs = pod_dirs
        self._rate = rate or RateLimit()
        self._clock = clock
        self._seen: set[EventKey] = set()
        self._waiting: set[EventKey] = set()  # refused, tried again
        self._launches: dict[JobKey, _Launch] = {}
        self._warn = WarnOnce()
        self.suppressed = 0  # events refused at least once
        self._logged_at_s = 0.0

    def poll(self, now_wall_s: float | None = None) -> list[Incident]:
        now = time.time() if now_wall_s is None else now_wall_s
        now_s = self._clock()
        out: list[Incident] = []
        present: set[EventKey] = set()
        refused: set[EventKey] = set()
        suppressed: Counter[str] = Counter()
        for record in self._reader.read_all(now):
            if not record.events:
                continue
            if not claims_consistent(record):
                self._warn(record, CONTRADICTED)
                continue
            job = job_key(record)
            for event in record.events:
                key = event_key(record, event)
                if key in self._seen:
                    present.add(key)
                elif job is not None:  # held, unseen, until its launch's window has passed
                    launch = self._launches.setdefault(job, _Launch(now_s, {}))
                    launch.events[key] = (record, event)
                elif self._admit(record, suppressed):
                    present.add(key)
                    out.append(framework_incident(record, event, now, self._pod_dirs))
                else:
                    refused.add(key)
        for job, launch in list(self._launches.items()):
            if now_s - launch.first_seen_s < JOB_WINDOW_S:
                continue
            del self._launches[job]
            first_record = min(launch.events.values(), key=lambda item: item[1].mono_s)[0]
            if self._admit(first_record, suppressed):
                present.update(launch.events)
                out.append(launch_incident(list(launch.events.values()), now, self._pod_dirs))
            else:
                refused.update(launch.events)
        # Files gone are forgotten (the sets stay bounded by what the reader holds); a refused
        # event stays unseen, to be recorded once its source has tokens.
        self._seen = present
        fresh = len(refused - self._waiting)
        self.suppressed += fresh
        self._waiting = refused
        if suppressed and (fresh or now - self._logged_at_s >= SUMMARY_EVERY_S):
            self._logged_at_s = now
            log.warning(
                "framework_ooms_rate_limited",
                extra={
                    "waiting": sum(suppressed.values()),
                    "sources": len(suppressed),
                    "by_source": dict(suppressed.most_common(5)),
                    "consequence": "recorded when their source's budget allows",
                },
            )
        return out

    def _admit(self, record: FlightRecord, suppressed: Counter[str]) -> bool:
        """Whether the record's source may report one more event now (else it is counted)."""
        vouched = self._pod_dirs and record.pod_dir is not None
        source = f"pod_dir {record.pod_dir}" if vouched else f"uid {record.owner_uid}"
        if self._rate.allow(source, vouched):
            return True
        suppressed[source] += 1
        return False

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
            {
                "rank": r.meta.rank,
                "local_rank": r.meta.local_rank,
                "device": None if e.device is None else escape_control(e.device),
                "after_s": round(e.mono_s - first.mono_s, 3),
            }
            for r, e in ordered
        ]
    return incident
