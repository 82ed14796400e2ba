"""Which directories the cgroup watcher walks next, between its rescans.

inotify tells of a new directory, and a walk of it finds the cgroups inside; a tree still
growing (a pod whose containers come one after another) is walked again on the next poll.
Outside `kubepods` a directory is kept only once it has a limit, which its maker writes a
moment after mkdir, and so may each directory made inside it: a new one is walked again
every `NEW_DIR_RECHECK_EVERY_S` for `NEW_DIR_RECHECK_S` (a memcg walked before its limit is
set would otherwise wait for the 60 s rescan, its first minute unseen).  Under `kubepods`
every level is kept at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from oomwatch.cgroups.discovery import Hierarchy

NEW_DIR_RECHECK_S = 5.0
NEW_DIR_RECHECK_EVERY_S = 0.25
MAX_RECHECKS = 256

Walk = tuple[Hierarchy, str]
"""A hierarchy and the relative path of the directory to walk under."""


class WalkPlan:
    """The walks due at the watcher's next poll (one thread: the watcher's)."""

    def __init__(self) -> None:
        self._under: set[Walk] = set()  # new directories, or trees still growing
        self._recheck: dict[Walk, float] = {}  # ... and those made with no limit, until then
        self._recheck_at_s = 0.0  # when the rechecks are next due

    @property
    def pending(self) -> bool:
        """Whether a walk waits for the next poll (not counting the timed rechecks)."""
        return bool(self._under)

    def add(self, walks: Iterable[Walk]) -> None:
        self._under.update(walks)

    def clear(self) -> None:
        """A full rescan walks every directory."""
        self._under.clear()

    def due(self, now_s: float) -> set[Walk]:
        """The walks to do now; rechecks past their time are dropped, the others come every
        `NEW_DIR_RECHECK_EVERY_S`, not at every poll (an OOM's close watch polls every 2 ms)."""
        walks, self._under = self._under, set()
        for key, until_s in list(self._recheck.items()):
            if now_s > until_s:
                del self._recheck[key]
        if self._recheck and now_s >= self._recheck_at_s:
            walks.update(self._recheck)
            self._recheck_at_s = now_s + NEW_DIR_RECHECK_EVERY_S
        return walks

    def walked(self, walks: Iterable[Walk], kept: Callable[[str], bool], now_s: float) -> None:
        """After the walks: a directory now kept (`kept(relpath)`) needs no recheck; one not
        kept yet is walked again for `NEW_DIR_RECHECK_S`."""
        for key in walks:
            if kept(key[1]):
                self._recheck.pop(key, None)
            elif key not in self._recheck and len(self._recheck) < MAX_RECHECKS:
                if not self._recheck:
                    self._recheck_at_s = now_s + NEW_DIR_RECHECK_EVERY_S
                self._recheck[key] = now_s + NEW_DIR_RECHECK_S

    def next_due_s(self, now_s: float) -> float | None:
        """When a recheck is next due (None: none waits)."""
        return max(now_s, self._recheck_at_s) if self._recheck else None
