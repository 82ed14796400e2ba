"""OOM counters of memory cgroups, and the bookkeeping that turns readings into kill deltas.

Pure: readings go in, `CounterDelta`s come out; the watcher does the I/O.

Rules (why they are what they are):
- Notifications merge, so deltas come from diffing counters, never from counting wake-ups.
- First sight at startup is a baseline: kills from before the daemon started are not news,
  unless an earlier run of this boot left its checkpoint (`prior`): then a cgroup starts from
  the counters that run had explained (kills counted while the daemon was down are news),
  and one the checkpoint does not know is treated like a cgroup found after startup.
- v2 `memory.events` counters are hierarchical, so a kill shows in the container and in every
  ancestor.  Each kill is reported once, at the deepest watched cgroup that explains it: a
  parent reports only what its watched children do not (e.g. the container's cgroup vanished
  before we read it, or the process sat in the pod cgroup itself).  Callers must read a parent
  before its children in one pass (the watcher does), so a parent never runs ahead.
- A cgroup that appears after startup under an already-watched v2 ancestor starts from its
  current counters: that ancestor already accounts for anything earlier.  One with no watched
  ancestor, and every v1 cgroup (v1 counters are local, nothing above counts them), starts
  from zero: a non-zero counter at first sight is a kill that happened before we found it.
- At a restart from a checkpoint, a v2 cgroup the checkpoint does not know (made, or found,
  after it was saved) starts from zero when its ancestor's gain since the checkpoint covers
  its counters: the kills happened while we were down, and belong to it, not the ancestor
  (a real 6.1 kill -9 in a burst put them at the QoS slice, pod UID lost: the v2 storms).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import methodcaller

from oomwatch.cgroups.discovery import WatchedCgroup
from oomwatch.cgroups.files import CgroupGone, keyed_value


@dataclass(frozen=True, slots=True)
class OomCounters:
    """The OOM counters of one cgroup (v1 has no `oom` or `oom_group_kill`: they read 0)."""

    oom: int = 0
    oom_kill: int = 0
    oom_group_kill: int = 0
    under_oom: bool = False  # v1 only: the cgroup is in OOM right now

    def minus(self, other: OomCounters) -> OomCounters:
        return OomCounters(
            self.oom - other.oom,
            self.oom_kill - other.oom_kill,
            self.oom_group_kill - other.oom_group_kill,
            self.under_oom,
        )

    def plus(self, other: OomCounters) -> OomCounters:
        return OomCounters(
            self.oom + other.oom,
            self.oom_kill + other.oom_kill,
            self.oom_group_kill + other.oom_group_kill,
            self.under_oom,
        )

    def clamped(self) -> OomCounters:
        return OomCounters(
            max(self.oom, 0), max(self.oom_kill, 0), max(self.oom_group_kill, 0), self.under_oom
        )

    def any(self) -> bool:
        return self.oom > 0 or self.oom_kill > 0 or self.oom_group_kill > 0


ZERO = OomCounters()
_DEPTH = methodcaller("count", "/")  # sort key: how deep a relpath is (C speed)


@dataclass(frozen=True, slots=True)
class CounterDelta:
    """Increases of a cgroup's OOM counters since they were last reported.

    `vanished=True` says the cgroup is gone (its counters with it); kills it had that were not
    read in time show up as a delta of its nearest watched ancestor.
    `observed_at_s` is CLOCK_MONOTONIC seconds, the clock of the kernel log's timestamps;
    `since_s` is when the counters were last known at their old values (None: unknown), so
    the kills happened between the two.
    """

    cgroup: WatchedCgroup
    oom: int
    oom_kill: int
    oom_group_kill: int
    observed_at_s: float
    vanished: bool = False
    since_s: float | None = None


def parse_memory_events(data: bytes) -> OomCounters:
    """v2 `memory.events` / `memory.events.local` (missing keys read 0: older kernels)."""
    return OomCounters(
        keyed_value(data, b"oom") or 0,
        keyed_value(data, b"oom_kill") or 0,
        keyed_value(data, b"oom_group_kill") or 0,
    )


def parse_oom_control(data: bytes) -> OomCounters:
    """v1 `memory.oom_control` (`oom_kill` exists since 4.13)."""
    return OomCounters(
        oom_kill=keyed_value(data, b"oom_kill") or 0,
        under_oom=keyed_value(data, b"under_oom") == 1,
    )


@dataclass(slots=True)
class _Entry:
    cgroup: WatchedCgroup
    parent: str | None  # relpath of the nearest watched ancestor
    baseline: OomCounters
    last: OomCounters
    reported: OomCounters = ZERO  # cumulative, reported at this cgroup itself
    # v2: counts of former children no longer subtracted live (vanished, or moved below a
    # cgroup found later); may be negative for the cgroup they moved under.
    offset: OomCounters = ZERO
    children: set[str] = field(default_factory=set)

    def cumulative(self) -> OomCounters:
        return self.last.minus(self.baseline)


class CounterBook:
    """Baselines, last readings and what was reported, per watched cgroup."""

    def __init__(self, prior: Mapping[str, OomCounters] | None = None) -> None:
        self._entries: dict[str, _Entry] = {}
        self._started = False
        self._prior = prior  # `levels()` of an earlier run of this boot (startup scan only)

    def __contains__(self, relpath: str) -> bool:
        return relpath in self._entries

    def relpaths(self) -> list[str]:
        return list(self._entries)

    def add(
        self,
        cgroups: list[WatchedCgroup],
        readings: dict[str, OomCounters],
        observed_at_s: float,
        ancestors: Mapping[str, OomCounters] | None = None,
    ) -> list[CounterDelta]:
        """Start watching cgroups (parents first) from their first readings.

        The first call is the startup scan: everything read becomes a baseline.  Later calls
        return the kills that cgroups starting from zero already counted.  `ancestors` are
        fresh readings of watched v2 ancestors of the new cgroups, and of those ancestors'
        watched children (read after the ancestor): a new cgroup whose counts the ancestor's
        growth since it was last accounted covers was killed in after that (it was made and
        killed between two reads): it starts from zero, so its kills are its own, not its
        ancestor's.  A sibling's kill since its last read is growth the new cgroup may not
        take: the siblings' fresh readings explain it (else a kill of the new cgroup already
        reported at the ancestor would be reported again, in its place).
        """
        from_zero: dict[str, bool] = {}
        for cg in cgroups:
            if cg.relpath in self._entries or cg.relpath not in readings:
                continue
            parent = self._nearest_ancestor(cg.relpath)
            reading = readings[cg.relpath]
            prior = None if self._started or self._prior is None else self._prior.get(cg.relpath)
            if prior is not None and _within(prior, reading):
                zero, baseline = False, prior
            else:  # a prior above the reading: a new cgroup under an old name
                if not self._started and self._prior is None:
                    zero = False
                elif cg.version == 1 or parent is None:
                    zero = True
                elif not self._started and from_zero.get(parent) is False:
                    zero = _within(reading, self._unreported(self._entries[parent]))
                elif parent in from_zero:  # under a cgroup added in this same call
                    zero = from_zero[parent]
                elif ancestors is not None and parent in ancestors:
                    grown = self._unreported(
                        self._entries[parent], ancestors[parent], fresh=ancestors
                    )
                    zero = reading.any() and _within(reading, grown)
                else:
                    zero = False
                baseline = ZERO if zero else reading
            from_zero[cg.relpath] = zero
            entry = _Entry(cg, parent, baseline, reading)
            self._entries[cg.relpath] = entry
            if parent is not None:
                self._entries[parent].children.add(cg.relpath)
                for sibling in list(self._entries[parent].children):
                    if sibling.startswith(cg.relpath + "/"):
                        self._move(self._entries[sibling], entry)
        self._started = True
        return self.update({rel: self._entries[rel].last for rel in from_zero}, observed_at_s)

    def _move(self, child: _Entry, new_parent: _Entry) -> None:
        """A cgroup found later sits between `child` and its old parent."""
        assert child.parent is not None
        old_parent = self._entries[child.parent]
        old_parent.children.discard(child.cgroup.relpath)
        if child.cgroup.version == 2:
            # The old parent now subtracts new_parent, which counts only from its baseline.
            moved = child.cumulative()
            old_parent.offset = old_parent.offset.plus(moved)
            new_parent.offset = new_parent.offset.minus(moved)
        child.parent = new_parent.cgroup.relpath
        new_parent.children.add(child.cgroup.relpath)

    def _nearest_ancestor(self, relpath: str) -> str | None:
        path = relpath
        while "/" in path:
            path = path.rsplit("/", 1)[0]
            if path in self._entries:
                return path
        return None

    def with_descendants(self, relpaths: set[str]) -> list[str]:
        """These cgroups and every watched one below them, parents before children.

        A pass must read a parent before its children so the parent never runs ahead.
        """
        entries = self._entries
        todo = [rel for rel in relpaths if rel in entries]
        if not any(entries[rel].children for rel in todo):
            return todo  # the common polling case: leaves only, any order will do
        out: set[str] = set()
        while todo:
            rel = todo.pop()
            if rel not in out:
                out.add(rel)
                todo.extend(entries[rel].children)
        return sorted(out, key=_DEPTH)

    def update(
        self, readings: dict[str, OomCounters | None], observed_at_s: float
    ) -> list[CounterDelta]:
        """Apply one pass of readings (None = the cgroup is gone); return what is new.

        Deltas come deepest first, so a vanished container precedes its pod's delta.
        """
        for rel, reading in readings.items():
            if reading is not None and rel in self._entries:
                self._entries[rel].last = reading
        fresh_deltas: list[CounterDelta] = []
        for rel in sorted(readings, key=_DEPTH, reverse=True):
            entry = self._entries.get(rel)
            if entry is None or readings[rel] is None:
                continue
            fresh = self._unreported(entry)
            if fresh.any():
                entry.reported = entry.reported.plus(fresh)
                fresh_deltas.append(
                    CounterDelta(
                        entry.cgroup,
                        fresh.oom,
                        fresh.oom_kill,
                        fresh.oom_group_kill,
                        observed_at_s,
                    )
                )
        vanished: list[CounterDelta] = []
        gone = [rel for rel, reading in readings.items() if reading is None]
        for rel in sorted(gone, key=_DEPTH):  # a gone parent takes its children with it
            if rel in self._entries:
                vanished.extend(self._drop(rel, observed_at_s))
        return sorted(vanished, key=lambda d: _DEPTH(d.cgroup.relpath), reverse=True) + fresh_deltas

    def ancestor_of(self, relpath: str) -> str | None:
        """The nearest watched ancestor of a cgroup."""
        return self._nearest_ancestor(relpath)

    def children_of(self, relpath: str) -> list[str]:
        """The watched cgroups whose nearest watched ancestor is this one."""
        entry = self._entries.get(relpath)
        return sorted(entry.children) if entry is not None else []

    def fresh_ancestors(
        self, added: list[WatchedCgroup], read: Callable[[str], OomCounters]
    ) -> dict[str, OomCounters]:
        """Fresh readings (`read` raises `CgroupGone`) of the watched v2 ancestors of new
        cgroups, then of their watched children, for `add`: hierarchical counters tell
        whether a new cgroup's kills came after they were read.  The ancestor first: a kill
        between the two reads then shows in a child only, which credits the new cgroup
        less, never twice."""
        out: dict[str, OomCounters] = {}
        new = {cg.relpath for cg in added}
        for cg in added:
            parent = self.ancestor_of(cg.relpath) if cg.version == 2 else None
            if parent is None or parent in new or parent in out:
                continue
            for rel in [parent, *self.children_of(parent)]:
                try:
                    out[rel] = read(rel)
                except CgroupGone:
                    if rel == parent:
                        break
        return out

    def _unreported(
        self,
        entry: _Entry,
        now: OomCounters | None = None,
        fresh: Mapping[str, OomCounters] | None = None,
    ) -> OomCounters:
        own = entry.cumulative() if now is None else now.minus(entry.baseline)
        if entry.cgroup.version == 2:
            own = own.minus(entry.offset)
            for child in entry.children:
                own = own.minus(self._accounted(self._entries[child], fresh))
        return own.minus(entry.reported).clamped()

    def _drop(self, relpath: str, observed_at_s: float) -> list[CounterDelta]:
        entry = self._entries[relpath]
        accounted = self._accounted(entry)
        out: list[CounterDelta] = []
        for child in list(entry.children):
            out.extend(self._drop(child, observed_at_s))
        del self._entries[relpath]
        if entry.parent is not None and entry.parent in self._entries:
            parent = self._entries[entry.parent]
            parent.children.discard(relpath)
            if entry.cgroup.version == 2:
                parent.offset = parent.offset.plus(accounted)
        out.append(CounterDelta(entry.cgroup, 0, 0, 0, observed_at_s, vanished=True))
        return out

    def _accounted(
        self, entry: _Entry, fresh: Mapping[str, OomCounters] | None = None
    ) -> OomCounters:
        """What a subtree has explained: its last reading (or its `fresh` one), or what it
        reported if more.

        A cgroup read before a kill and gone before the next read has a stale counter while
        a child read after the kill reported it; the parent must count it as explained.
        """
        inner = entry.reported.plus(entry.offset)
        for child in entry.children:
            inner = inner.plus(self._accounted(self._entries[child], fresh))
        now = fresh.get(entry.cgroup.relpath) if fresh is not None else None
        cum = entry.cumulative() if now is None else now.minus(entry.baseline)
        return OomCounters(
            max(cum.oom, inner.oom),
            max(cum.oom_kill, inner.oom_kill),
            max(cum.oom_group_kill, inner.oom_group_kill),
        )

    def levels(self) -> dict[str, OomCounters]:
        """Per cgroup, the reading that every delta reported so far explains (a checkpoint).

        v2: at least what the cgroup itself and its children reported, so a parent read
        before a child's kill does not owe that kill again after a restart.
        """
        out: dict[str, OomCounters] = {}
        for rel, entry in self._entries.items():
            if entry.cgroup.version == 1:
                out[rel] = entry.last
            else:
                out[rel] = entry.baseline.plus(self._accounted(entry))
        return out

    def last(self, relpath: str) -> OomCounters | None:
        entry = self._entries.get(relpath)
        return None if entry is None else entry.last


def _within(prior: OomCounters, reading: OomCounters) -> bool:
    """Counters only grow while a cgroup lives: a prior above the reading is another cgroup."""
    return (
        prior.oom <= reading.oom
        and prior.oom_kill <= reading.oom_kill
        and prior.oom_group_kill <= reading.oom_group_kill
    )
