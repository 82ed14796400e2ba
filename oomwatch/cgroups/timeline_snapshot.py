"""The memory windows a kill may need, as a value the sampler's owner hands another thread.

The sampler's rings change under its owner's lock every pass; another thread must not read
them.  After each pass (and at kill news) the owner refreshes a `TimelineSnapshot` of the
containers sampled every interval now (`TimelineSampler.attended`: near their limit, growing,
killed or notified lately), so the loop freezes a kill's window from a value.  Only those are
copied, and only when a new sample came: a calm container's ring is never copied, so memory
and work grow with the containers in trouble, not with the node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from copy import copy
from dataclasses import dataclass, field

from oomwatch.cgroups.ring import DecimatedRing
from oomwatch.cgroups.timeline import summarize
from oomwatch.incident import Timeline, TimelineSample

__all__ = ["SnapshotMaker", "TimelineSnapshot"]


@dataclass(frozen=True, slots=True)
class TimelineSnapshot:
    """The samples (oldest first) of some containers as of one pass, never changed."""

    windows: Mapping[str, tuple[TimelineSample, ...]] = field(default_factory=dict)
    window_s: float = 600.0
    interval_s: float | None = None

    def __contains__(self, relpath: object) -> bool:
        return relpath in self.windows

    def freeze(self, relpath: str, at_s: float) -> Timeline | None:
        """The window before `at_s` (wall clock), as `TimelineSampler.freeze` gives it; None
        if this container is not in the snapshot.  Its samples are the reader's own copies."""
        samples = self.windows.get(relpath)
        if samples is None:
            return None
        return summarize(map(copy, samples), at_s, self.window_s, self.interval_s)


class SnapshotMaker:
    """(The sampler owner's thread) the last snapshot and when each of its windows was
    taken, so an unchanged ring is not copied again."""

    def __init__(self, window_s: float, interval_s: float) -> None:
        self._window_s = window_s
        self._interval_s = interval_s
        self._taken_at: dict[str, float | None] = {}  # relpath -> its ring's last sample then
        self.snapshot = TimelineSnapshot(window_s=window_s, interval_s=interval_s)

    def refresh(self, attended: Iterable[tuple[str, DecimatedRing]]) -> TimelineSnapshot:
        """The snapshot of these containers (call under the sampler's lock)."""
        old = self.snapshot.windows
        windows: dict[str, tuple[TimelineSample, ...]] = {}
        taken_at: dict[str, float | None] = {}
        for relpath, ring in attended:
            last_s = ring.last_time_s()
            if relpath in old and self._taken_at.get(relpath) == last_s:
                windows[relpath] = old[relpath]
            else:
                windows[relpath] = tuple(ring.samples())
            taken_at[relpath] = last_s
        self._taken_at = taken_at
        if windows.keys() != old.keys() or any(windows[r] is not old[r] for r in windows):
            self.snapshot = TimelineSnapshot(windows, self._window_s, self._interval_s)
        return self.snapshot
