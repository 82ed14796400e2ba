"""OOM notifications of cgroup v1 memcgs, and the witnesses they let the agent take.

A v1 memcg notifies an eventfd registered on its `memory.oom_control` through
`cgroup.event_control` when an OOM begins in it or in an ancestor
(`Documentation/admin-guide/cgroup-v1/memory.rst` section 10; `memcg1_oom_prepare` calls
`mem_cgroup_oom_notify`, which walks the subtree, before `mem_cgroup_out_of_memory` picks and
kills the victim).  So the notification comes before the kill and before its `Killed
process` line: stamped on arrival, it says when the OOM began, and the victim is still in the
cgroup (`cgroup.procs`) for a moment.  v2 has no eventfd: its `memory.events` `oom` count,
read on inotify, says the same (`CounterDelta.oom`).

Registering needs write access to `cgroup.event_control` (mode 0200, root): an agent without
it (the DaemonSet's non-root agent on a read-only cgroup mount) goes on without
notifications, and attribution leans on the counters alone.  Closing the eventfd unregisters
it; removing the cgroup signals it once more (`memcg_event_remove`), which is no OOM.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Callable, Iterable
from dataclasses import dataclass

HOT_WINDOW_S = 0.5  # after an OOM notification, its cgroup's counter is read at most this long
HOT_POLL_INTERVAL_S = 0.002  # ... this often, until its kill's counter rises
MAX_SIGHTINGS_PER_PASS = 4096


@dataclass(frozen=True, slots=True)
class OomSignal:
    """An OOM notification of a cgroup, fired between `after_s` (None: unknown) and `by_s`
    (CLOCK_MONOTONIC seconds)."""

    cgroup: str
    after_s: float | None
    by_s: float


@dataclass(frozen=True, slots=True)
class Sighting:
    """A pid the kernel showed in a cgroup (task table or `cgroup.procs`) at `at_s`."""

    pid: int
    cgroup: str
    at_s: float


class MemcgEventfds:
    """One eventfd per registered v1 memcg, all in one epoll the owner polls (`fileno()`).

    `control` is the file the notification is about and `arguments` what follows its fd in
    `cgroup.event_control`: `memory.oom_control` for OOMs (the default), or
    `memory.pressure_level` with `"<low|medium|critical>[,local|hierarchy]"` for reclaim pressure
    (`mm/vmpressure.c`: an eventfd fires at its level and every level above it).
    Not thread-safe: one thread owns it.
    """

    def __init__(self, control: str = "memory.oom_control", arguments: str = "") -> None:
        self._control = control
        self._suffix = f" {arguments}" if arguments else ""
        self._epoll = select.epoll()
        self._fd_to_rel: dict[int, str] = {}
        self._rel_to_fd: dict[str, int] = {}
        self.since_s: dict[str, float] = {}  # relpath -> when its notifications began
        self.failure: str | None = None  # why registration failed (it is not tried again)
        self._drained_at_s: float | None = None

    def fileno(self) -> int:
        return self._epoll.fileno()

    def __contains__(self, relpath: str) -> bool:
        return relpath in self._rel_to_fd

    def __len__(self) -> int:
        return len(self._rel_to_fd)

    def register(
        self, relpath: str, fs_path: str, now_s: float, arguments: str | None = None
    ) -> bool:
        """Ask the kernel to notify this memcg; False where it cannot (and why in `failure`,
        after which nothing more is tried).  `arguments` replaces the ones given at
        construction (a usage threshold differs per memcg)."""
        if self.failure is not None or relpath in self._rel_to_fd:
            return relpath in self._rel_to_fd
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            control = os.open(os.path.join(fs_path, self._control), os.O_RDONLY)
            try:
                fd = os.open(os.path.join(fs_path, "cgroup.event_control"), os.O_WRONLY)
                try:
                    suffix = self._suffix if arguments is None else f" {arguments}"
                    os.write(fd, f"{efd} {control}{suffix}".encode())
                finally:
                    os.close(fd)
            finally:
                os.close(control)
        except OSError as exc:
            os.close(efd)
            if exc.errno not in (2, 19):  # ENOENT, ENODEV: this cgroup just went away
                self.failure = f"{fs_path}/cgroup.event_control: {exc.strerror}"
            return False
        self._epoll.register(efd, select.EPOLLIN)
        self._fd_to_rel[efd] = relpath
        self._rel_to_fd[relpath] = efd
        self.since_s[relpath] = now_s
        return True

    def unregister(self, relpath: str) -> None:
        efd = self._rel_to_fd.pop(relpath, None)
        self.since_s.pop(relpath, None)
        if efd is None:
            return
        self._fd_to_rel.pop(efd, None)
        with contextlib.suppress(OSError):
            self._epoll.unregister(efd)
        os.close(efd)  # the kernel drops the registration with the last reference

    def fired(self) -> dict[str, int]:
        """Notifications since the last look, counted per cgroup (an eventfd adds them up)."""
        counts: dict[str, int] = {}
        for efd, _ in self._epoll.poll(0):
            count = 0
            with contextlib.suppress(BlockingIOError, OSError):
                count = os.eventfd_read(efd)
            relpath = self._fd_to_rel.get(efd)
            if relpath is not None and count:
                counts[relpath] = counts.get(relpath, 0) + count
        return counts

    def drain(self, now_s: float) -> list[OomSignal]:
        """Notifications since the last drain, each dated between that drain and now."""
        after_s, self._drained_at_s = self._drained_at_s, now_s
        return [OomSignal(relpath, after_s, now_s) for relpath in self.fired()]

    def close(self) -> None:
        for relpath in list(self._rel_to_fd):
            self.unregister(relpath)
        self._epoll.close()


class OomWitness:
    """What the watcher learns of OOMs besides the counters: notifications (v1 eventfds, v2
    `oom` rises), the pids in a cgroup when its OOM began, and which cgroups to read often.

    `path_of` gives a watched cgroup's directory (None: not watched).  Not thread-safe: the
    watcher's thread owns it; the owner takes `signals` and `sightings` after each pass.
    """

    def __init__(self, path_of: Callable[[str], str | None], *, eventfds: bool = True) -> None:
        self._path_of = path_of
        self._events = MemcgEventfds() if eventfds else None
        # relpath -> (noted at, read its counter often until then)
        self._hot: dict[str, tuple[float, float]] = {}
        self.signals: list[OomSignal] = []
        self.sightings: list[Sighting] = []

    def fileno(self) -> int | None:
        return None if self._events is None else self._events.fileno()

    @property
    def failure(self) -> str | None:
        return None if self._events is None else self._events.failure

    def watched_since(self) -> dict[str, float]:
        return {} if self._events is None else dict(self._events.since_s)

    @property
    def hot(self) -> bool:
        return bool(self._hot)

    def watch(self, relpath: str, fs_path: str, now_s: float) -> None:
        """Register a v1 memcg's OOM notifications."""
        if self._events is not None:
            self._events.register(relpath, fs_path, now_s)

    def forget(self, relpath: str) -> None:
        self._hot.pop(relpath, None)
        if self._events is not None:
            self._events.unregister(relpath)

    def note_fired(self, now_s: float) -> bool:
        """Note the notifications fired since the last look (each one's pids read while its
        victim is still in the cgroup, its cgroup put under close watch); whether any was an
        OOM's."""
        if self._events is None:
            return False
        noted = len(self.signals)
        for signal in self._events.drain(now_s):
            self.note(signal, now_s)
        return len(self.signals) > noted

    def hot_cgroups(self, now_s: float) -> set[str]:
        """Notifications since the last look, noted (`note_fired`), and the cgroups still
        under close watch: all to read now."""
        self.note_fired(now_s)
        self._hot = {rel: hot for rel, hot in self._hot.items() if hot[1] > now_s}
        return set(self._hot)

    def settle(self, killed_in: Iterable[str], oom_group: Callable[[str], bool | None]) -> None:
        """A kill's counter rose in these cgroups: the close watch it followed has what it
        was for (the rise, dated by the read that saw it), so it ends: for the killed cgroup,
        its ancestors up to the topmost one under close watch, and its own subtree, where
        noted with it (v1 notifies the OOMing memcg's whole subtree, v2 counts the `oom` in
        every ancestor); one noted later is another OOM's.  A sibling noted in the same pass
        keeps its watch: in a storm it may be an OOM of its own whose kill is still to come,
        and its rise wants the same dating.  Where a cgroup from the kill up
        to there kills as a group (`oom_group`: v2 `memory.oom.group`), the members' kills
        follow the first and want the same dating: that watch runs its window."""
        hot = self._hot
        if not hot:
            return
        grouped: dict[str, bool] = {}  # oom_group read once per cgroup and call
        for rel in sorted(killed_in, key=_depth, reverse=True):  # the victim's before its parents'
            path = _self_and_ancestors(rel)
            top = next((a for a in path if a in hot), None)
            if top is None:
                continue
            up_to_top = path[path.index(top) :]
            for a in up_to_top:
                if a not in grouped:
                    grouped[a] = bool(oom_group(a))
            if any(grouped[a] for a in up_to_top):
                continue
            noted_at_s = hot[top][0]
            below = rel.rstrip("/") + "/"
            for other in [o for o in hot if o in up_to_top or o.startswith(below)]:
                if hot[other][0] <= noted_at_s:
                    del hot[other]

    def note_v2(self, rises: Iterable[tuple[str, float | None, float]], now_s: float) -> None:
        """v2 notifies by counting: (cgroup, since, observed) of each `oom` rise."""
        for relpath, since_s, observed_s in rises:
            self.note(OomSignal(relpath, since_s, observed_s), now_s)

    def note(self, signal: OomSignal, now_s: float) -> None:
        path = self._path_of(signal.cgroup)
        if path is None or not os.path.isdir(path):
            return  # a removed cgroup's eventfd fires once more: no OOM
        self.signals.append(signal)
        self._hot[signal.cgroup] = (now_s, now_s + HOT_WINDOW_S)
        if len(self.sightings) < MAX_SIGHTINGS_PER_PASS:
            self.sightings.extend(Sighting(pid, signal.cgroup, now_s) for pid in pids_in(path))

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None


def _depth(relpath: str) -> int:
    return relpath.count("/")


def _self_and_ancestors(relpath: str) -> list[str]:
    """`/a/b/c` -> [`/a`, `/a/b`, `/a/b/c`]: the topmost first."""
    parts = relpath.split("/")
    return ["/".join(parts[:n]) for n in range(2, len(parts) + 1)]


def pids_in(fs_path: str) -> list[int]:
    """The pids of a cgroup (and of its direct children, e.g. crun's `container`) as this
    pid namespace sees them; 0s (processes of other namespaces) are left out."""
    pids: list[int] = []
    for directory in _with_children(fs_path):
        procs = os.path.join(directory, "cgroup.procs")
        with contextlib.suppress(OSError), open(procs, "rb") as fh:
            pids.extend(int(tok) for tok in fh.read().split() if tok.isdigit() and tok != b"0")
    return pids


def _with_children(fs_path: str) -> list[str]:
    out = [fs_path]
    with contextlib.suppress(OSError), os.scandir(fs_path) as entries:
        out += [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    return out
