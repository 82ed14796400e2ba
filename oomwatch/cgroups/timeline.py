"""The memory timeline: per-container samples in a bounded ring, frozen into an incident at a kill.

A kill is the end of a story (a leak growing for minutes, a spike, a cache that would not
shrink); the ring (`ring.DecimatedRing`) keeps the last `window_s` of it.  Only containers
that need attention are sampled every interval (`attention`); files stay open (see
`files.CgroupFile`), only the needed keys are parsed, and `memory.stat` (the costly file) is
re-read only when usage moved: byte-identical usage means the breakdown is the one we
already have.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from oomwatch.cgroups.attention import HOT_HOLD_S, UsageThresholds, needs_attention
from oomwatch.cgroups.discovery import WatchedCgroup
from oomwatch.cgroups.files import CgroupFile, CgroupGone, keyed_value, parse_int, parse_limit_bytes
from oomwatch.cgroups.ring import DecimatedRing
from oomwatch.cgroups.timeline_snapshot import summarize
from oomwatch.incident import Timeline, TimelineSample

SAMPLED_LEVELS = frozenset({"container", "cgroup"})
FINE_S = 60.0  # the ring keeps every sample of the last minute ...
COARSE_STEP_S = 10.0  # ... and one per 10 s before that
LIMIT_REFRESH_SAMPLES = 10  # limits change rarely (in-place resize): re-read every 10th sample

# (anon, file, shmem, thp, kernel parts, inactive file) keys of memory.stat, by version.
_V1_KEYS = (
    b"total_rss",
    b"total_cache",
    b"total_shmem",
    b"total_rss_huge",
    (),
    b"total_inactive_file",
)
_V2_KEYS = (
    b"anon",
    b"file",
    b"shmem",
    b"anon_thp",
    (b"kernel_stack", b"pagetables", b"sec_pagetables", b"percpu", b"sock", b"slab"),
    b"inactive_file",
)


@dataclass(slots=True)
class _Breakdown:
    anon: int | None = None
    file: int | None = None
    shmem: int | None = None
    thp: int | None = None
    kernel: int | None = None
    inactive_file: int | None = None


class _Source:
    """Open files, cached values and the ring of one cgroup."""

    __slots__ = (
        "absent_s",
        "breakdown",
        "cgroup",
        "due_s",
        "gone",
        "hot_until_s",
        "last_usage",
        "limit",
        "limit_age",
        "limit_file",
        "order",
        "ring",
        "stat_file",
        "usage_file",
    )

    def __init__(self, cgroup: WatchedCgroup, ring: DecimatedRing) -> None:
        v2 = cgroup.version == 2
        base = cgroup.fs_path
        self.cgroup = cgroup
        usage_name = "memory.current" if v2 else "memory.usage_in_bytes"
        self.usage_file = CgroupFile(base, 64, name=usage_name)
        self.limit_file = CgroupFile(base, 64, name="memory.max" if v2 else "memory.limit_in_bytes")
        self.stat_file = CgroupFile(base, 8192, name="memory.stat")
        self.ring = ring
        self.last_usage = -1
        self.limit: int | None = None
        self.limit_age = LIMIT_REFRESH_SAMPLES
        self.breakdown = _Breakdown()
        self.gone = False
        self.absent_s: float | None = None  # not watched since then
        self.order = 0  # its place in the watched cgroups: samples come out in that order
        self.due_s = 0.0  # the next sample is taken at the first pass at or after this
        self.hot_until_s = 0.0  # sampled every interval until then

    def close(self) -> None:
        self.usage_file.close()
        self.limit_file.close()
        self.stat_file.close()

    def take(self, now_s: float) -> TimelineSample | None:
        """One sample, or None (and the files closed) if the cgroup is gone."""
        try:
            usage = parse_int(self.usage_file.read())
            if usage is None:
                return None
            previous_usage = self.ring.last_usage()
            if self.limit_age >= LIMIT_REFRESH_SAMPLES:
                self.limit = parse_limit_bytes(self.limit_file.read())
                self.limit_age = 0
            self.limit_age += 1
            if usage != self.last_usage:
                self.breakdown = _parse_breakdown(self.stat_file.read(), self.cgroup.version)
                self.last_usage = usage
        except CgroupGone:
            self.gone = True
            self.close()
            return None
        b = self.breakdown
        self.ring.append(
            now_s,
            (
                usage,
                -1 if self.limit is None else self.limit,
                -1 if b.anon is None else b.anon,
                -1 if b.file is None else b.file,
                -1 if b.shmem is None else b.shmem,
                -1 if b.thp is None else b.thp,
                -1 if b.kernel is None else b.kernel,
                -1 if b.inactive_file is None else b.inactive_file,
            ),
        )
        if needs_attention(usage, previous_usage, self.limit):
            self.hot_until_s = max(self.hot_until_s, now_s + HOT_HOLD_S)
        return TimelineSample(
            now_s, usage, self.limit, b.anon, b.file, b.shmem, b.thp, b.kernel, b.inactive_file
        )


def _order(source: _Source) -> int:
    return source.order


def _parse_breakdown(stat: bytes, version: int) -> _Breakdown:
    anon, file, shmem, thp, kernel_parts, inactive_file = _V2_KEYS if version == 2 else _V1_KEYS
    kernel: int | None = None
    if version == 2:
        # 5.18+ prints a `kernel` total; older kernels only the parts.
        kernel = keyed_value(stat, b"kernel")
        if kernel is None:
            parts = [keyed_value(stat, key) for key in kernel_parts]
            known = [p for p in parts if p is not None]
            kernel = sum(known) if known else None
    return _Breakdown(
        keyed_value(stat, anon),
        keyed_value(stat, file),
        keyed_value(stat, shmem),
        keyed_value(stat, thp),
        kernel,
        keyed_value(stat, inactive_file),
    )


class TimelineSampler:
    """Samples container cgroups into bounded rings and freezes a window at a kill.

    Every `interval_s` a container needs attention (`attention.needs_attention`, or `attend`),
    one per `cold_interval_s` otherwise (the default: `interval_s`, every container every
    time).  With `thresholds` a v1 container's usage crossing half its limit is notified by
    the kernel (`crossed()`), and the owner attends to it at once.
    Not thread-safe: call `sample` and `freeze` from one thread or under one lock.
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        window_s: float = 600.0,
        keep_gone_s: float | None = None,
        *,
        cold_interval_s: float | None = None,
        thresholds: UsageThresholds | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.window_s = window_s
        self.cold_interval_s = interval_s if cold_interval_s is None else cold_interval_s
        self.thresholds = thresholds
        # A vanished container's ring is kept long enough for its kill to be frozen.
        self._keep_gone_s = window_s if keep_gone_s is None else keep_gone_s
        self._sources: dict[str, _Source] = {}
        self._next_expiry_s = 0.0
        self._to_arm: dict[str, tuple[str, int | None]] = {}  # relpath -> (path, new limit)
        self._passes = 0
        self._queue: list[tuple[float, str]] = []  # (due, relpath): a heap, stale entries too
        self._limits: dict[str, int] | None = None  # limits_bytes(), until one changes

    def sample(
        self, cgroups: Iterable[WatchedCgroup] | None, now_s: float
    ) -> list[tuple[WatchedCgroup, TimelineSample]]:
        """One sample of each container-level cgroup that is due; `now_s` is the wall clock.

        `cgroups`: the watched cgroups, or None when they are the ones of the last call (the
        pass then costs what the due containers cost, not what the node holds)."""
        if cgroups is not None:
            self._sync(cgroups, now_s)
        due: list[_Source] = []
        queue = self._queue
        while queue and queue[0][0] <= now_s:
            due_s, relpath = heapq.heappop(queue)
            source = self._sources.get(relpath)
            if source is None or source.due_s != due_s or source.gone:
                continue  # rescheduled since (attended), or its files are gone
            if source.absent_s is not None:
                continue  # no longer watched: due again when it is
            source.due_s = -1.0  # taken this pass: a second entry for it is stale
            due.append(source)
        due.sort(key=_order)
        out: list[tuple[WatchedCgroup, TimelineSample]] = []
        thresholds = self.thresholds
        for source in due:
            cg = source.cgroup
            limit = source.limit
            taken = source.take(now_s)
            if taken is None:
                if thresholds is not None:
                    thresholds.disarm(cg.relpath)
                self._limits = None
                continue
            out.append((cg, taken))
            if now_s < source.hot_until_s:
                step = self.interval_s
            elif thresholds is not None and thresholds.armed(cg.relpath):
                step = max(self.cold_interval_s, thresholds.quiet_interval_s)
            else:
                step = self.cold_interval_s
            # a pass comes every interval, a little late or early: due half an interval early
            self._schedule(source, now_s + step - self.interval_s / 2)
            if taken.limit_bytes != limit:
                self._limits = None
                if thresholds is not None and cg.version == 1:
                    self._to_arm[cg.relpath] = (cg.fs_path, taken.limit_bytes)
        self._passes += 1
        if now_s >= self._next_expiry_s:
            self._expire(now_s)
            self._next_expiry_s = now_s + 60.0
        return out

    def _sync(self, cgroups: Iterable[WatchedCgroup], now_s: float) -> None:
        """Take the watched set: new containers due now, those no longer watched put aside
        (their rings kept `keep_gone_s` for a kill's timeline), those back due again."""
        present: set[str] = set()
        for order, cg in enumerate(cgroups):
            if cg.identity.level not in SAMPLED_LEVELS:
                continue
            present.add(cg.relpath)
            source = self._sources.get(cg.relpath)
            if source is None or source.cgroup.fs_path != cg.fs_path:
                if source is not None:
                    self._drop(cg.relpath)
                ring = DecimatedRing(self.interval_s, self.window_s, FINE_S, COARSE_STEP_S)
                source = self._sources[cg.relpath] = _Source(cg, ring)
                self._limits = None
                if self._passes:  # born while watched: starting up, its memory grows from 0
                    source.hot_until_s = now_s + HOT_HOLD_S
                self._schedule(source, now_s)
            elif source.absent_s is not None:
                source.absent_s = None
                self._schedule(source, now_s)
            source.order = order
        for rel, source in self._sources.items():
            if rel not in present and source.absent_s is None:
                source.absent_s = now_s

    def _schedule(self, source: _Source, due_s: float) -> None:
        source.due_s = due_s
        heapq.heappush(self._queue, (due_s, source.cgroup.relpath))

    def arm_thresholds(self, at_most: int) -> int:
        """Register the thresholds of containers whose limit is new (the kernel waits for an
        RCU grace period on each, milliseconds): call it between passes, `at_most` at a
        time; returns how many of those were due (0: none was)."""
        if self.thresholds is None:
            self._to_arm.clear()
            return 0
        due = list(self._to_arm)[:at_most]
        for relpath in due:
            fs_path, limit = self._to_arm.pop(relpath)
            if relpath in self._sources:
                self.thresholds.arm(relpath, fs_path, limit, time.monotonic())
        return len(due)

    def attend(self, relpath: str, now_s: float, hold_s: float) -> None:
        """Sample this cgroup (and the containers inside it) every interval from the next
        pass on, for `hold_s` (a kill, an OOM notification, pressure, a crossed threshold)."""
        prefix = relpath.rstrip("/") + "/"
        for rel, source in self._sources.items():
            if rel == relpath or rel.startswith(prefix):
                source.hot_until_s = max(source.hot_until_s, now_s + hold_s)
                if source.due_s != 0.0:
                    self._schedule(source, 0.0)

    def attend_moved(self, relpath: str, now_s: float, hold_s: float) -> None:
        """`attend` for a cgroup whose v2 memory.events moved, unless it holds containers and
        one of them is sampled every interval already: the kernel counts a container's
        event in its ancestors too, and the ancestors' notification may come a pass later
        than the container's; it must not wake the container's neighbours."""
        if relpath not in self._sources:
            prefix = relpath.rstrip("/") + "/"
            if any(
                now_s < source.hot_until_s
                for rel, source in self._sources.items()
                if rel.startswith(prefix)
            ):
                return
        self.attend(relpath, now_s, hold_s)

    def attended(self, now_s: float) -> Iterator[tuple[str, DecimatedRing]]:
        """The containers sampled every interval now (a kill in them is likely) and their
        rings, for the owner to snapshot (`timeline_snapshot`)."""
        return ((rel, s.ring) for rel, s in self._sources.items() if now_s < s.hot_until_s)

    def hot(self, now_s: float) -> int:
        """How many containers are sampled every interval now."""
        return sum(1 for source in self._sources.values() if now_s < source.hot_until_s)

    def limits_bytes(self) -> dict[str, int]:
        """The limit of every container sampled (as of its last sample), unlimited left out:
        a new dict when one changed, else the last one (never changed in place)."""
        if self._limits is None:
            self._limits = {
                rel: source.limit
                for rel, source in self._sources.items()
                if source.limit is not None and not source.gone
            }
        return self._limits

    def _drop(self, relpath: str) -> None:
        self._sources.pop(relpath).close()
        self._limits = None
        self._to_arm.pop(relpath, None)
        if self.thresholds is not None:
            self.thresholds.disarm(relpath)

    def _expire(self, now_s: float) -> None:
        stale = [
            rel
            for rel, source in self._sources.items()
            if source.absent_s is not None and now_s - source.absent_s > self._keep_gone_s
        ]
        for rel in stale:
            self._drop(rel)

    def freeze(self, relpath: str, at_s: float) -> Timeline | None:
        """The window before `at_s` (wall clock) for an incident; None if never sampled."""
        source = self._sources.get(relpath)
        if source is None:
            return None
        return summarize(source.ring.samples(), at_s, self.window_s, self.interval_s)

    def close(self) -> None:
        for source in self._sources.values():
            source.close()
        self._sources.clear()
        if self.thresholds is not None:
            self.thresholds.close()
