"""Watch the OOM counters of container cgroups: inotify where the kernel notifies, else polling.

v2 `memory.events` raises IN_MODIFY on change (the notify also reaches every ancestor's file);
v1 `memory.oom_control` raises nothing through inotify, so v1 container cgroups are polled, but
only after the node's own `oom_kill` count (`/proc/vmstat`) moved: the kernel bumps it right
beside a memcg's, and one 24 us read then stands in for hundreds of files on a quiet node.
New and removed cgroups show as IN_CREATE/IN_DELETE on the directories of the node, QoS and
pod cgroups (both versions), so only the new subtree is walked; a rescan on a slow timer is
the safety net (a new `kubepods` tree deep below the root, a limit written after its mkdir, a
cgroup removed unnoticed: its counter read fails; after an overflow every directory is listed,
else only those inotify does not tell of), and the daemon may call `rescan()` (every
directory) when the kernel log names a cgroup it does not know.  Which directories to walk
between rescans is `walks.WalkPlan`'s; the arithmetic lives in `counters.CounterBook`.

Each delta says when its kills happened (`since_s` .. `observed_at_s`): a v1 counter is
known unchanged whenever the node's count stood still, a v2 one whenever inotify was drained
with nothing for it (less the kernel's notification delay).  OOM notifications (v1 eventfds,
v2 `oom` rises) put their cgroup under close watch: its counter is read every
`HOT_POLL_INTERVAL_S` until the kill's counter rises (at most `HOT_WINDOW_S`; a group kill
runs the window, its members' kills follow the first), so the kill is dated to milliseconds,
and its pids are read at once, while the victim is still there.

One class, a little over 400 lines: discovery and the counter passes share every piece of
its state (the watched set, its open files, the book, the notifier); what stands apart is
in `walks.py`, `counters.py`, `notify.py` and `oom_events.py`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from oomwatch.cgroups.counters import (
    CounterBook,
    CounterDelta,
    OomCounters,
    parse_memory_events,
    parse_oom_control,
)
from oomwatch.cgroups.discovery import (
    MAX_CGROUPS,
    Hierarchy,
    WatchedCgroup,
    counter_file_name,
    discover,
    find_hierarchies,
    locate,
    read_between_rescans,
)
from oomwatch.cgroups.files import CgroupFile, CgroupGone, read_oom_group
from oomwatch.cgroups.node_kills import NODE_VMSTAT, NodeOomKills
from oomwatch.cgroups.notify import CgroupNotifier
from oomwatch.cgroups.oom_events import HOT_POLL_INTERVAL_S, OomWitness
from oomwatch.cgroups.walks import WalkPlan

_MAX_WARNINGS = 100
_MAX_WALKS_PER_SCAN = 3  # a pod and its containers made one after another need two
# cgroupfs delays a file's notification up to 10 ms after the previous one
# (`CGROUP_FILE_NOTIFY_MIN_INTV` in kernel/cgroup/cgroup.c) and delivers it from a work item.
V2_NOTIFY_DELAY_S = 0.05


class CgroupWatcher:
    """OOM counter deltas for every watched cgroup, each kill reported once.

    Not thread-safe: one thread owns it (`hierarchies` may be read from anywhere).
    """

    def __init__(
        self,
        roots: Sequence[str],
        poll_interval_s: float = 1.0,
        use_inotify: bool = True,
        *,
        rescan_interval_s: float = 60.0,
        include_limited: bool = True,
        max_cgroups: int = MAX_CGROUPS,
        clock: Callable[[], float] = time.monotonic,
        prior_counters: Mapping[str, OomCounters] | None = None,
        node_vmstat: str | None = NODE_VMSTAT,
        oom_events: bool = True,
    ) -> None:
        self.hierarchies: list[Hierarchy] = [h for root in roots for h in find_hierarchies(root)]
        self.warnings: list[str] = []
        self._poll_interval_s = poll_interval_s
        self._rescan_interval_s = rescan_interval_s
        self._include_limited = include_limited
        self._max_cgroups = max_cgroups
        self._clock = clock
        self._book = CounterBook(prior_counters)  # a checkpoint of this boot, if any
        self._cgroups: dict[str, WatchedCgroup] = {}
        self.generation = 0  # counts changes of the watched set (`cgroups()` the same between)
        self._files: dict[str, CgroupFile] = {}
        self._raw: dict[str, bytes] = {}  # last content read: unchanged bytes need no parsing
        self._polled: set[str] = set()  # every cgroup read on the poll timer
        self._polled_v2: set[str] = set()  # ... of which v2 (inotify failed): read every poll
        self._node_kills = NodeOomKills(node_vmstat)
        self._walks = WalkPlan()  # directories to walk between rescans
        self._overflowed = False  # inotify lost events: the next rescan lists every directory
        self._periodic = False  # the rescan under way is the timer's, events not lost
        self._pending: list[CounterDelta] = []
        self._gone: set[str] = set()  # known removed, to be dropped by the next pass
        # v2 cgroups whose memory.events changed (any event: high, max, oom...) since taken
        self.events_moved: set[str] = set()
        self._notifier = CgroupNotifier(use_inotify, self._warn)
        self._next_poll_s = 0.0
        self._next_rescan_s = 0.0
        self._read_all = False
        self.witness = OomWitness(self._fs_path, eventfds=oom_events)
        self._read_at: dict[str, float] = {}  # relpath -> its counter was last read then
        self._last_read: dict[str, float | None] = {}  # ... the read before that
        self._v1_quiet_at: float | None = None  # no v1 counter moved before then
        self._v2_quiet_at: float | None = None  # ... no inotify-watched v2 counter
        for hierarchy in self.hierarchies:
            self._notifier.watch_dir(hierarchy, "")
        self.rescan()

    # --- what the daemon calls -------------------------------------------------------------

    def fileno(self) -> int | None:
        """The inotify descriptor to poll for readability (None: polling only)."""
        return self._notifier.fileno()

    def cgroups(self) -> list[WatchedCgroup]:
        return list(self._cgroups.values())

    def poll_changes(self, *, force: bool = False) -> list[CounterDelta]:
        """Counter increases since the last call (and cgroups that vanished); OOM
        notifications and pids seen go to `signals` and `sightings`.  `force` reads the
        polled counters now (a kill line arrived), whatever the poll timer says."""
        now = self._clock()
        v2_quiet_before = self._v2_quiet_at
        dirty = self._drain_inotify()
        if self._notifier.enabled:
            self._v2_quiet_at = now - V2_NOTIFY_DELAY_S
        dirty.update(self.witness.hot_cgroups(now))
        if now >= self._next_rescan_s:
            # the periodic safety net: every counter (node/QoS too), every directory inotify
            # does not tell of (all of them after an overflow)
            self._periodic = not self._overflowed
            self._overflowed = False
            self.rescan()
            self._read_all = True
        else:
            walks = self._walks.due(now)
            for hierarchy, under in walks:
                self._scan(hierarchy, under)
            self._walks.walked(walks, self._kept, now)
        v1_quiet_before = self._v1_quiet_at
        if force or now >= self._next_poll_s:
            # v1 counters only after the node's kills moved; v2 ones every poll.
            moved = self._node_kills.moved()
            dirty.update(self._polled if moved else self._polled_v2)
            if force and moved:  # a kill line came: its counter moved, notified or not yet
                dirty.update(self._notifier.counters)
            if self._node_kills.quiet:
                self._v1_quiet_at = now
            self._next_poll_s = now + self._poll_interval_s
        if self._read_all:
            dirty.update(self._cgroups)
            self._read_all = False
        dirty.update(self._gone)
        deltas, self._pending = self._pending, []
        if dirty:
            quiet = {1: v1_quiet_before, 2: v2_quiet_before}
            deltas.extend(self._dated(d, quiet) for d in self._pass(dirty))
        self.witness.note_v2(
            (
                (d.cgroup.relpath, d.since_s, d.observed_at_s)
                for d in deltas
                if d.oom > 0 and not d.vanished and d.cgroup.version == 2
            ),
            now,
        )
        if self.witness.hot:
            killed_in = [d.cgroup.relpath for d in deltas if d.oom_kill > 0]
            self.witness.settle(killed_in, self.oom_group)
        return deltas

    def next_due_s(self) -> float:
        """When `poll_changes()` next has timed work (polled counters, the periodic rescan),
        on the watcher's clock; between then and now only inotify can bring news."""
        if self._pending or self._walks.pending or self._gone or self._read_all:
            return self._clock()
        due = self._next_rescan_s
        recheck_s = self._walks.next_due_s(self._clock())
        if recheck_s is not None:
            due = min(due, recheck_s)
        if self.witness.hot:
            due = min(due, self._clock() + HOT_POLL_INTERVAL_S)
        if self._polled:
            due = min(due, self._next_poll_s)
        return due

    def rescan(self, relpath: str | None = None) -> None:
        """Look for new and removed cgroups now; kills that new ones show come with the next poll.

        With `relpath` (a cgroup the kernel log names that is not watched yet) only the new part
        of its path is walked: from just below its deepest watched ancestor.  Without, every
        hierarchy is walked (and the periodic-rescan timer restarts).  Either way only new and
        removed cgroups are looked at; the periodic rescan also re-reads every counter.
        """
        if relpath is not None:
            parts = [p for p in relpath.split("/") if p]
            top = 1
            for depth in range(len(parts), 0, -1):
                if "/" + "/".join(parts[:depth]) in self._cgroups:
                    top = depth + 1
                    break
            if top <= len(parts):
                for hierarchy in self.hierarchies:
                    self._scan(hierarchy, "/" + "/".join(parts[:top]))
            return
        # The periodic one lists no watched directory below `kubepods` (inotify tells of its
        # new children; at 1,000 containers listing every pod's directory each minute was
        # ~45 % of the agent's idle CPU); its vanished children show in the counter reads.
        periodic, self._periodic = self._periodic, False
        self._next_rescan_s = self._clock() + self._rescan_interval_s
        self._walks.clear()
        for hierarchy in self.hierarchies:
            notified = self._notifier.watched_dirs(hierarchy) if periodic else set()
            self._scan(hierarchy, "", notified)

    # --- discovery ---------------------------------------------------------------------------

    def _scan(self, hierarchy: Hierarchy, under: str, notified: Collection[str] = ()) -> None:
        """Walk `under` for new and removed cgroups, and again while the walk put new
        directories under watch: a child made between a directory's listing and its
        inotify watch sends no event (real 6.12 in the lab VM: a container made just after
        its pod was found stayed unwatched, and its first kill went to the pod)."""
        for _ in range(_MAX_WALKS_PER_SCAN):
            if not self._scan_once(hierarchy, under, notified):
                return
        self._walks.add([(hierarchy, under)])  # a tree still growing: the next poll walks on

    def _scan_once(self, hierarchy: Hierarchy, under: str, notified: Collection[str]) -> bool:
        """One walk; whether it put a directory under watch."""
        watched_dirs = self._notifier.directories
        cgroups, truncated = discover(
            hierarchy,
            include_limited=self._include_limited,
            max_cgroups=self._max_cgroups,
            known=self._cgroups,
            under=under,
            notified=notified,
        )
        if truncated:
            self._warn(f"cgroup discovery under {hierarchy.mount_path} hit its bounds")
        else:  # what a complete walk did not find is gone
            found = {cg.relpath for cg in cgroups}
            self._gone.update(
                rel
                for rel, cg in self._cgroups.items()
                if cg.version == hierarchy.version
                and (rel == under or rel.startswith(under + "/"))
                and rel not in found
            )
        new = [cg for cg in cgroups if cg.relpath not in self._cgroups]
        readings: dict[str, OomCounters] = {}
        for cg in new:
            if len(self._cgroups) >= self._max_cgroups:
                self._warn(f"watching at most {self._max_cgroups} cgroups")
                break
            self._cgroups[cg.relpath] = cg
            self.generation += 1
            self._files[cg.relpath] = CgroupFile(cg.fs_path, 256, name=counter_file_name(cg))
            reading = self._read(cg.relpath)
            if reading is None:
                self._untrack(cg.relpath)
                continue
            readings[cg.relpath] = reading
            if read_between_rescans(cg) and not self._notifier.watch_counters(cg):
                self._polled.add(cg.relpath)
                if cg.version == 2:
                    self._polled_v2.add(cg.relpath)
            if cg.version == 1 and read_between_rescans(cg):
                self.witness.watch(cg.relpath, cg.fs_path, self._clock())
            if cg.identity.level != "container":
                self._notifier.watch_dir(hierarchy, cg.relpath)
        added = [cg for cg in new if cg.relpath in readings]
        ancestors = self._book.fresh_ancestors(added, self._read_fresh)
        self._pending.extend(self._book.add(added, readings, self._clock(), ancestors))
        return self._notifier.directories > watched_dirs

    def _kept(self, relpath: str) -> bool:
        """A walked directory is watched for good (outside `kubepods`: once it has a limit)."""
        cg = self._cgroups.get(relpath)
        return cg is not None and cg.identity.level != "cgroup"

    def counter_levels(self) -> dict[str, OomCounters]:
        """The counters every delta returned so far explains (`CounterBook.levels`), less
        what a scan found that `poll_changes()` has not returned yet."""
        levels = self._book.levels()
        for d in self._pending:
            if d.cgroup.relpath in levels:
                held = OomCounters(d.oom, d.oom_kill, d.oom_group_kill)
                levels[d.cgroup.relpath] = levels[d.cgroup.relpath].minus(held)
        return levels

    def oom_group(self, relpath: str) -> bool | None:
        """Whether the cgroup kills as a group (`memory.oom.group`; v1 never); None if gone."""
        located = self._locate(relpath)
        return None if located is None else read_oom_group(*located)

    def close(self) -> None:
        for cgroup_file in self._files.values():
            cgroup_file.close()
        self._files.clear()
        self._node_kills.close()
        self.witness.close()
        self._notifier.close()

    # --- internals ---------------------------------------------------------------------------

    def _pass(self, dirty: set[str]) -> list[CounterDelta]:
        """Read the dirty cgroups (parents first); only changed bytes are parsed.

        A counter read between `started` and the end of the reads shows the cgroup's kills
        up to some moment in between: an unchanged one says "no kill before `started`", a
        risen one "the kill came before the end".  Both are taken here, not when the poll
        began: a rescan before the pass (new pods walked, their counters read) took 100+ ms
        on an emulated, loaded CPU, and a rise dated at the poll's start was "seen" before
        its own kill, so the kill's own counter was ruled out (lab VM, 6.12, a burst)."""
        files, raw, gone = self._files, self._raw, self._gone
        readings: dict[str, OomCounters | None] = {}
        read_at = self._read_at
        started = self._clock()
        for rel in self._book.with_descendants(dirty):
            if rel in gone:
                readings[rel] = None
                continue
            try:
                data = files[rel].read()
            except CgroupGone:
                readings[rel] = None
                continue
            self._last_read[rel] = read_at.get(rel)
            read_at[rel] = started
            if raw.get(rel) != data:
                if rel in raw and self._cgroups[rel].version == 2:
                    self.events_moved.add(rel)
                raw[rel] = data
                readings[rel] = self._parse(rel, data)
        gone.clear()
        deltas = self._book.update(readings, self._clock())
        for delta in deltas:
            if delta.vanished:
                self._untrack(delta.cgroup.relpath)
        return deltas

    def _dated(self, delta: CounterDelta, quiet: Mapping[int, float | None]) -> CounterDelta:
        """The delta with the last time its counters were known unchanged: the read before
        this one, or a node-wide quiet moment (v1: the node's count stood still; v2: inotify
        was drained with nothing for it), whichever is later."""
        rel = delta.cgroup.relpath
        known = [self._last_read.get(rel)]
        if delta.cgroup.version == 1 or rel in self._notifier.counters:
            known.append(quiet.get(delta.cgroup.version))
        times = [t for t in known if t is not None]
        return replace(delta, since_s=max(times) if times else None)

    def _read(self, relpath: str) -> OomCounters | None:
        """Counters now, or None if the cgroup is gone."""
        try:
            data = self._files[relpath].read()
        except CgroupGone:
            return None
        self._read_at[relpath] = self._clock()
        self._raw[relpath] = data
        return self._parse(relpath, data)

    def _read_fresh(self, relpath: str) -> OomCounters:
        """Counters now, leaving the last reading as it was (raises `CgroupGone`)."""
        return self._parse(relpath, self._files[relpath].read())

    def _parse(self, relpath: str, data: bytes) -> OomCounters:
        if self._cgroups[relpath].version == 2:
            return parse_memory_events(data)
        return parse_oom_control(data)

    def _drain_inotify(self) -> set[str]:
        """Cgroups whose counters changed; schedules walks of new directories."""
        drained = self._notifier.drain()
        if drained.overflow:
            self._next_rescan_s = 0.0  # events were lost: walk everything
            self._overflowed = True
        self._gone.update(drained.gone)
        self._gone.update(rel for rel in drained.removed if rel in self._cgroups)
        self._walks.add(drained.made)
        return drained.changed

    def _untrack(self, relpath: str) -> None:
        self._notifier.forget(relpath)
        cgroup_file = self._files.pop(relpath, None)
        if cgroup_file is not None:
            cgroup_file.close()
        self._polled.discard(relpath)
        self._polled_v2.discard(relpath)
        if self._cgroups.pop(relpath, None) is not None:
            self.generation += 1
        self._raw.pop(relpath, None)
        self._read_at.pop(relpath, None)
        self._last_read.pop(relpath, None)
        self.witness.forget(relpath)

    def _fs_path(self, relpath: str) -> str | None:
        watched = self._cgroups.get(relpath)
        return None if watched is None else watched.fs_path

    def _locate(self, relpath: str) -> tuple[str, int] | None:
        watched = self._cgroups.get(relpath)
        if watched is not None:
            return (watched.fs_path, watched.version) if os.path.isdir(watched.fs_path) else None
        return locate(self.hierarchies, relpath)

    def _warn(self, message: str) -> None:
        if message not in self.warnings and len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(message)
