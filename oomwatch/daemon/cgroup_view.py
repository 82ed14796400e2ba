"""What the cgroup side knows, as the one value the loop gets from it with each batch of news.

The cgroup worker's thread (`CgroupThread`) owns the watcher and the sampler; the loop owns the
pipeline.  The loop never reads the worker's objects: it gets a `CgroupView` (built by the
worker, replaced whole, never changed) and asks it about the cgroup at a kill.  Its looks at
the host are read-only and need nothing the worker holds: `memory.oom.group` and
`cgroup.procs` are read from the hierarchy's directory, and the memory window before a kill
from the `TimelineSnapshot` the worker took of the containers in trouble.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from oomwatch.cgroups.counters import CounterDelta, OomCounters
from oomwatch.cgroups.discovery import Hierarchy, locate
from oomwatch.cgroups.files import read_oom_group
from oomwatch.cgroups.oom_events import OomSignal, Sighting
from oomwatch.cgroups.timeline_snapshot import TimelineSnapshot
from oomwatch.daemon.forecast_news import ForecastNews
from oomwatch.daemon.host import dying, live_pids, may_kill_group
from oomwatch.incident import Incident, Timeline
from oomwatch.reconcile import CgroupFacts

log = logging.getLogger("oomwatch.cgroups")


@dataclass(frozen=True, slots=True)
class CounterLevels:
    """The OOM counters every counter batch up to the `batches`-th explains (a checkpoint's)."""

    counters: Mapping[str, OomCounters]
    batches: int


@dataclass(frozen=True, slots=True)
class CgroupBatch:
    """What one counter pass (or sample) found, for the loop; `started_at_s` (monotonic)
    is when the pass began reading: every kill printed before it shows in `deltas`."""

    deltas: list[CounterDelta]
    signals: list[OomSignal]
    sightings: list[Sighting]
    started_at_s: float | None
    levels: CounterLevels | None = None  # asked for: the levels as of this batch (no news)


@dataclass(frozen=True, slots=True)
class CgroupView:
    """The watched cgroups as of one batch: their limits, which are watched, the mounted
    hierarchies, why OOM notifications are not watched (None: they are); read-only looks at
    one cgroup (the default view knows no cgroup).  As `CgroupWorker.take_news` returns it,
    also what the forecast changed since the last take, and the counter levels when the
    last batch taken was the one asked for them."""

    limits_bytes: Mapping[str, int] = field(default_factory=dict)
    watched: frozenset[str] = frozenset()
    hierarchies: tuple[Hierarchy, ...] = ()
    timelines: TimelineSnapshot = field(default_factory=TimelineSnapshot, compare=False)
    # a message to the worker (it snapshots on its own thread, then wakes the loop)
    ask_timeline: Callable[[str], None] | None = field(default=None, compare=False)
    oom_notify_failure: str | None = None
    forecast: ForecastNews = field(default_factory=ForecastNews, compare=False)
    levels: CounterLevels | None = field(default=None, compare=False)

    @property
    def cgroup_v2(self) -> bool:
        return any(h.version == 2 for h in self.hierarchies)

    @property
    def facts(self) -> CgroupFacts:
        """What the reconciliation weighs a header-less kill against."""
        return CgroupFacts(self.limits_bytes)

    def timeline(self, relpath: str, at_s: float) -> Timeline | None:
        """The sampled memory window of a container before `at_s` (wall clock), if this
        view's snapshot holds the container (`timeline_due`)."""
        return self.timelines.freeze(relpath, at_s)

    def timeline_due(self, relpath: str) -> bool:
        """The container is watched but not in this view's snapshot (`request_timeline`)."""
        return relpath in self.watched and relpath not in self.timelines

    def request_timeline(self, relpath: str) -> None:
        """Ask the worker for a container's window: a later view holds it, or says it has
        none (the worker answers at once, after the sampling pass it may be in)."""
        if self.ask_timeline is not None:
            self.ask_timeline(relpath)

    def oom_group(self, relpath: str) -> bool | None:
        """`memory.oom.group` of a cgroup (None: gone, or unreadable)."""
        located = self._locate(relpath)
        if located is None:
            return None
        try:
            return read_oom_group(*located)
        except Exception:
            log.exception("oom_group_unreadable", extra={"cgroup": relpath})
            return None

    def survived(self, relpath: str, victims: frozenset[int]) -> bool | None:
        """Whether a process other than the victims (and others already exiting, like the
        peers of a killed PID 1) is left in the cgroup; None if it is gone."""
        located = self._locate(relpath)
        if located is None:
            return None
        pids = live_pids(located[0])
        return None if pids is None else any(not dying(p) for p in pids - victims)

    def may_kill_group(self, incident: Incident) -> bool:
        """Whether the members' kill lines of a memory.oom.group kill may still follow.
        Where every memory hierarchy is v1 (no `memory.oom.group`), never, without a look
        at the hierarchy: the loop asks this at each kill line it decodes."""
        if self.hierarchies and not self.cgroup_v2:
            return False
        return may_kill_group(incident, self.oom_group, cgroup_v2=self.cgroup_v2)

    def _locate(self, relpath: str) -> tuple[str, int] | None:
        return locate(self.hierarchies, relpath)
