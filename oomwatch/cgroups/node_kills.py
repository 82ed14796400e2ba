"""The node's OOM kill count (`/proc/vmstat` `oom_kill`): when v1 memcg counters can have moved.

v1 `memory.oom_control` cannot be watched with inotify, so it is polled; but the kernel
counts every kill in the node's `oom_kill` right beside the victim memcg's
(`count_vm_event(OOM_KILL); memcg_memory_event_mm(mm, MEMCG_OOM_KILL)` in
`__oom_kill_process`, both since 4.13).  While the node's count stands still no memcg's has
moved, and one 24 us read of /proc/vmstat stands in for a read of every v1 counter.
"""

from __future__ import annotations

from oomwatch.cgroups.files import CgroupFile, CgroupGone, keyed_value

NODE_VMSTAT = "/proc/vmstat"  # not namespaced: a pod reads the node's


class NodeOomKills:
    """Tells, once a poll, whether the memcg kill counters must be read this time."""

    def __init__(self, vmstat_path: str | None = NODE_VMSTAT) -> None:
        self._file = None if vmstat_path is None else CgroupFile(vmstat_path, size_bytes=8192)
        self._last: int | None = None  # the count at the last poll
        self._moved_last_poll = True  # so the first two polls read every counter
        # The count stood still since the previous poll: no memcg counter moved meanwhile
        # (the node's is bumped first, so a memcg's cannot have moved without it).
        self.quiet = False

    def count(self) -> int | None:
        """The node's kills since boot; None when unknown (no file, a kernel before 4.13)."""
        if self._file is None:
            return None
        try:
            return keyed_value(self._file.read(), b"oom_kill")
        except (CgroupGone, OSError):
            return None

    def moved(self) -> bool:
        """Whether memcg counters may have moved: the count changed at this poll or the one
        before (the node's kill is counted just before the memcg's, so the poll that sees the
        first may read the memcg a moment too early), or it cannot be read at all."""
        count = self.count()
        moved = count is None or count != self._last
        self.quiet = not moved and self._last is not None
        recent, self._moved_last_poll = self._moved_last_poll, moved
        self._last = count
        return moved or recent

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
