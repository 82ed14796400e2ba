"""The memory windows a kill may need, as a value the sampler's owner hands another thread.

The sampler's rings change under its owner's lock every pass; another thread must not read
them.  After each pass (and at kill news) the owner refreshes a `TimelineSnapshot` of the
containers sampled every interval now (`TimelineSampler.attended`: near their limit, growing,
killed or notified lately), so the loop freezes a kill's window from a value.  Only those are
copied, as bytes (`FrozenRing`, 72 a sample, decoded only for a kill), and only when a new
sample came: a calm container's ring is never copied, so memory and work grow with the
containers in trouble, not with the node.  `summarize` makes the
window a kill keeps, from the sampler's rings or from a snapshot alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from oomwatch.cgroups.ring import DecimatedRing, FrozenRing
from oomwatch.incident import Timeline, TimelineSample

__all__ = ["SnapshotMaker", "TimelineSnapshot", "growth_rate", "summarize"]


@dataclass(frozen=True, slots=True)
class TimelineSnapshot:
    """The samples (oldest first) of some containers as of one pass, never changed."""

    windows: Mapping[str, FrozenRing] = field(default_factory=dict)
    window_s: float = 600.0
    interval_s: float | None = None

    def __contains__(self, relpath: object) -> bool:
        return relpath in self.windows

    def freeze(self, relpath: str, at_s: float) -> Timeline | None:
        """The window before `at_s` (wall clock), as `TimelineSampler.freeze` gives it; None
        if this container is not in the snapshot (or has no sample before `at_s`)."""
        ring = self.windows.get(relpath)
        if ring is None:
            return None
        return summarize(ring.samples(), at_s, self.window_s, self.interval_s)


ASKED_KEEP_S = 60.0  # an asked-for container the sampler has no ring of: said so this long
NO_SAMPLES = FrozenRing()


class SnapshotMaker:
    """(The sampler owner's thread) the last snapshot and when each of its windows was
    taken, so an unchanged ring is not copied again."""

    def __init__(self, window_s: float, interval_s: float) -> None:
        self._window_s = window_s
        self._interval_s = interval_s
        self._taken_at: dict[str, float | None] = {}  # relpath -> its ring's last sample then
        self._asked: dict[str, float] = {}  # relpath -> when it was asked for (monotonic)
        self.snapshot = TimelineSnapshot(window_s=window_s, interval_s=interval_s)

    def refresh(
        self,
        attended: Iterable[tuple[str, DecimatedRing]],
        now_s: float,
        asked: Iterable[str] = (),
    ) -> TimelineSnapshot:
        """The snapshot of these containers (call under the sampler's lock), and of those
        `asked` for lately: empty where the sampler has no ring, so the asker stops waiting.
        `now_s` (monotonic) ages the asked-for ones out."""
        old = self.snapshot.windows
        windows: dict[str, FrozenRing] = {}
        taken_at: dict[str, float | None] = {}
        self._asked.update(dict.fromkeys(asked, now_s))
        self._asked = {r: t for r, t in self._asked.items() if now_s - t < ASKED_KEEP_S}
        windows.update(dict.fromkeys(self._asked, NO_SAMPLES))
        for relpath, ring in attended:
            last_s = ring.last_time_s()
            if relpath in old and self._taken_at.get(relpath) == last_s:
                windows[relpath] = old[relpath]
            else:
                windows[relpath] = ring.frozen()
            taken_at[relpath] = last_s
        self._taken_at = taken_at
        if windows.keys() != old.keys() or any(windows[r] is not old[r] for r in windows):
            self.snapshot = TimelineSnapshot(windows, self._window_s, self._interval_s)
        return self.snapshot


def summarize(
    samples: Iterable[TimelineSample], at_s: float, window_s: float, interval_s: float | None
) -> Timeline | None:
    """Peak, usage at the kill and the growth rate over the samples of `[at_s - window_s, at_s]`.

    Usage at the kill is the last sample before it: a sample after the kill shows the memory
    already freed.
    """
    window = [s for s in samples if at_s - window_s <= s.t_seconds <= at_s]
    if not window:
        return None
    # Attention samples a calm container less often than one near its limit: the window's
    # interval is the longest gap in it, not the configured period.
    gaps = [b.t_seconds - a.t_seconds for a, b in pairwise(window)]
    return Timeline(
        samples=window,
        interval_seconds=round(max(gaps), 3) if gaps else interval_s,
        peak_bytes=max(s.usage_bytes for s in window),
        usage_at_kill_bytes=window[-1].usage_bytes,
        growth_bytes_per_second=growth_rate(
            [s.t_seconds for s in window], [s.usage_bytes for s in window]
        ),
    )


def growth_rate(times_s: Sequence[float], values: Sequence[int]) -> float | None:
    """Least-squares slope (units per second); None with fewer than two distinct times."""
    n = len(times_s)
    if n < 2:
        return None
    mean_t = sum(times_s) / n
    mean_v = sum(values) / n
    var = sum((t - mean_t) ** 2 for t in times_s)
    if var == 0:
        return None
    cov = sum((t - mean_t) * (v - mean_v) for t, v in zip(times_s, values, strict=True))
    return cov / var
