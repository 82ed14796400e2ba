"""What the pipeline adds from the killed container's cgroup: sampled usage and a second look.

Both answer gaps the kernel leaves.  A kill known only from the counters, or one whose report
header was rate-limited, has no `memory:` lines: the daemon's own last sample before the kill
stands in, flagged `memcg_sampled` so nobody takes it for the kernel's numbers.  And when the
victim was PID 1 of the container's pid namespace, the kernel kills the other processes in
it only as PID 1 exits: right after the kill they may still be listed, so a container that
looks alive is looked at once more a moment later (without holding up the loop).
"""

from __future__ import annotations

from collections.abc import Callable

from oomwatch.daemon.cgroup_view import CgroupView
from oomwatch.incident import Breakdown, Incident, MemcgUsage, iso_time

SURVIVAL_RECHECK_S = 0.25
SAMPLED_NOTE = (
    "memcg usage/limit and breakdown are oomwatch's sample of the container cgroup at {at}"
    " (the last before the kill), not numbers the kernel printed"
)


def fill_sampled_usage(incident: Incident) -> None:
    """Usage, limit and breakdown from the timeline's last sample for a kill the kernel
    printed no `memory:` lines for (counter-only, or its report header rate-limited)."""
    timeline = incident.timeline
    if not (incident.kmsg_missing or incident.header_suppressed) or incident.memcg is not None:
        return
    if timeline is None or not timeline.samples:
        return
    last = timeline.samples[-1]  # the window ends at the kill: a later sample shows it freed
    incident.memcg = MemcgUsage(usage_bytes=last.usage_bytes, limit_bytes=last.limit_bytes)
    if incident.breakdown_bytes is None:
        incident.breakdown_bytes = Breakdown(
            anon=last.anon_bytes,
            file=last.file_bytes,
            shmem=last.shmem_bytes,
            thp=last.thp_bytes,
            kernel=last.kernel_bytes,
        )
    incident.memcg_sampled = True
    incident.notes.append(SAMPLED_NOTE.format(at=iso_time(last.t_seconds)))


class SurvivalRecheck:
    """An `Enricher` for the pipeline's deferral: looks again at survivors once it is due."""

    def __init__(
        self,
        survived: Callable[[str, frozenset[int]], bool | None],
        container: str,
        victims: frozenset[int],
        now_mono: float,
        mono_clock: Callable[[], float],
        delay_s: float = SURVIVAL_RECHECK_S,
    ) -> None:
        self._survived = survived
        self._container = container
        self._victims = victims
        self._due_mono = now_mono + delay_s
        self._mono = mono_clock

    def enrich(self, incident: Incident) -> bool:
        if self._mono() < self._due_mono:
            return False
        # The cgroup gone now (None) means everything in it has left: it did not survive.
        incident.container_survived = bool(self._survived(self._container, self._victims))
        return True


class TimelineWait:
    """An `Enricher` for the pipeline's deferral: a kill whose container was calm (not in the
    view's snapshot) gets its window from the view the worker publishes when asked."""

    def __init__(self, view: Callable[[], CgroupView], container: str, at_s: float) -> None:
        self._view = view
        self._container = container
        self._at_s = at_s

    def enrich(self, incident: Incident) -> bool:
        view = self._view()
        if view.timeline_due(self._container):
            return False
        incident.timeline = view.timeline(self._container, self._at_s)
        fill_sampled_usage(incident)
        return True
