"""Reconcile kernel-log kills with the cgroup OOM counters: every counted kill recorded once,
in the cgroup the kernel's evidence names -- or said to be ambiguous, never guessed.

Two witnesses see each kill.  The kernel log tells who died and why, but its report header is
rate-limited (later kills print only a bare `Killed process` line, with no cgroup) and records
can be overwritten before we read them.  The `oom_kill` counter of the victim's cgroup cannot
lie or be lost, but says nothing else.  Matching the two:

- a full report is passed on at once (latency matters) and waits to be matched by a counter
  rise of its cgroup (or an ancestor, for hierarchical v2 counters);
- a bare `Killed process` line waits until a counter pass that began after it arrived, then
  `attribution.options` tells which cgroups the evidence allows (counter rises bracketing its
  time, OOM notifications before it, its pid seen in a cgroup, its size against the limit),
  jointly with every other kill still waiting: one cgroup -> placed; several -> it waits
  `AMBIGUOUS_WAIT_S` for evidence still in flight, then is passed on as ambiguous, naming
  them; none -> it waits `GRACE_S` for a rescan to find its cgroup, then is passed on with
  its cgroup unknown;
- a counter rise that no log kill explains within `GRACE_S` becomes an incident of its own
  with `kmsg_missing: true`.

Counters stay the ground truth for how many kills there were: an ambiguous kill still uses up
one rise of one of its candidates, so nothing is counted twice.  Pure: state in, state out,
no clock or I/O; all times are CLOCK_MONOTONIC seconds (`kernel_offset_s` maps the kernel
log's stamps onto that clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from oomwatch.cgroups.oom_events import OomSignal, Sighting
from oomwatch.daemon.attribution import Options, Rise, WaitingKill, Witnesses, covers, options
from oomwatch.incident import (
    Attribution,
    AttributionCandidate,
    AttributionConfidence,
    AttributionMethod,
    Incident,
    iso_time,
)

KERNEL_KILL_KINDS = frozenset({"memcg", "global", "cpuset", "mempolicy", "unknown"})
GRACE_S = 2.5  # longer than one counter poll (1 s) plus the assembler's flush delay
# A log kill's counter may never come (cgroup not watched, or gone); a cgroup made just
# before its kill is found by the watcher's next rescan (every 10 s), which reads its
# counter from zero: keep the log kill longer than that so it is matched, not doubled.
UNMATCHED_KEEP_S = 30.0
# An ambiguous header-less kill waits this long after it arrived: reports of other kills
# that use up competing rises are printed within milliseconds of their counter bump.
AMBIGUOUS_WAIT_S = 0.25
SIGNAL_KEEP_S = 30.0
MAX_SIGNALS = 4096
MAX_SIGHTINGS = 4096
MISSING_NOTE = (
    "kill counted by the cgroup's oom_kill counter; its kernel report never arrived"
    " (wall_time is when the counter showed it)"
)


@dataclass(frozen=True, slots=True)
class CounterKills:
    """Kills one counter read showed (from a `CounterDelta`), and when they could have
    happened: after `since_s` (the counter still read its old value; None: unknown), by
    `observed_at_s`."""

    cgroup: str
    oom_kill: int
    observed_at_s: float
    oom_group_kill: int = 0
    since_s: float | None = None


@dataclass(frozen=True, slots=True)
class CgroupNews:
    """What the cgroup side saw since the last call."""

    kills: Sequence[CounterKills] = ()
    signals: Sequence[OomSignal] = ()
    sightings: Sequence[Sighting] = ()
    # a counter pass began at this time: every kill printed before it shows in the counters
    counted_at_s: float | None = None


@dataclass(frozen=True, slots=True)
class CgroupFacts:
    """Slowly changing facts of the watched cgroups."""

    signals_watched_since: Mapping[str, float] = field(default_factory=dict)
    limits_bytes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LogKill:
    """One victim of a full kernel report, waiting for the counter rise that explains it."""

    cgroup: str
    kernel_time_s: float | None
    expires_at_s: float


@dataclass(frozen=True, slots=True)
class BareKill:
    """A header-suppressed kill (no cgroup in the log), waiting to be placed."""

    incident: Incident
    arrived_s: float
    due_at_s: float


@dataclass(frozen=True, slots=True)
class ReconcileState:
    unmatched: tuple[LogKill, ...] = ()
    rises: tuple[Rise, ...] = ()
    bare: tuple[BareKill, ...] = ()
    sightings: tuple[Sighting, ...] = ()  # newest last, bounded
    signals: tuple[OomSignal, ...] = ()  # newest last, bounded
    last_kill: tuple[tuple[str, float], ...] = ()  # cgroup -> its newest placed kill
    counted_at_s: float | None = None

    @property
    def quiet(self) -> bool:
        """Nothing is waiting: every kill seen so far is matched or given up on."""
        return not (self.unmatched or self.rises or self.bare)

    @property
    def waiting_incidents(self) -> list[Incident]:
        """Incidents held back (bare kills not yet placed)."""
        return [b.incident for b in self.bare]


@dataclass(slots=True)
class Reconciled:
    state: ReconcileState
    ready: list[Incident] = field(default_factory=list)  # pass on down the pipeline now
    attributed: int = 0  # bare kills placed in one cgroup
    ambiguous: int = 0  # bare kills passed on with several candidates
    missing: int = 0  # kills known only from counters


def is_kernel_kill(incident: Incident) -> bool:
    return incident.kind in KERNEL_KILL_KINDS and not incident.kmsg_missing


def _log_cgroup(incident: Incident) -> str | None:
    return incident.task_memcg or incident.oom_memcg or incident.group_cgroup


@dataclass(slots=True)
class _Work:
    """The state being folded, as mutable lists."""

    unmatched: list[LogKill]
    rises: list[Rise]
    bare: list[BareKill]
    sightings: dict[int, Sighting]
    signals: list[OomSignal]
    last_kill: dict[str, float]
    counted_at_s: float | None
    out: Reconciled
    held: set[int] = field(default_factory=set)  # rises a waiting bare kill may still take

    def witnesses(self, facts: CgroupFacts) -> Witnesses:
        by_cgroup: dict[str, list[OomSignal]] = {}
        for signal in self.signals:
            by_cgroup.setdefault(signal.cgroup, []).append(signal)
        return Witnesses(
            signals={c: tuple(s) for c, s in by_cgroup.items()},
            signals_watched_since=facts.signals_watched_since,
            sightings=self.sightings,
            last_kill_s=self.last_kill,
            limits_bytes=facts.limits_bytes,
        )


def reconcile(
    state: ReconcileState,
    incidents: Sequence[Incident],
    news: CgroupNews | Iterable[CounterKills],
    now_s: float,
    *,
    facts: CgroupFacts | None = None,
    kernel_offset_s: float = 0.0,
    grace_s: float = GRACE_S,
    unmatched_keep_s: float = UNMATCHED_KEEP_S,
    wall_offset_s: float | None = None,
) -> Reconciled:
    """Fold new log incidents and cgroup news into the state; return what is ready.

    Call with no new input on each tick so waiting kills reach their deadline.
    `kernel_offset_s` is the kernel log's clock minus CLOCK_MONOTONIC; `wall_offset_s`
    (wall clock minus CLOCK_MONOTONIC) dates counter-only kills.
    """
    if not isinstance(news, CgroupNews):
        news = CgroupNews(kills=tuple(news))
    work = _Work(
        list(state.unmatched),
        list(state.rises),
        list(state.bare),
        {s.pid: s for s in state.sightings},
        list(state.signals),
        dict(state.last_kill),
        state.counted_at_s,
        Reconciled(state),
    )
    _take_incidents(work, incidents, now_s, kernel_offset_s, grace_s, unmatched_keep_s)
    _take_news(work, news, now_s, grace_s)
    _place(work, facts or CgroupFacts(), now_s, kernel_offset_s)
    _expire(work, now_s, wall_offset_s)
    work.out.state = ReconcileState(
        tuple(work.unmatched),
        tuple(work.rises),
        tuple(work.bare),
        tuple(sorted(work.sightings.values(), key=lambda s: s.at_s))[-MAX_SIGHTINGS:],
        tuple(s for s in work.signals if s.by_s > now_s - SIGNAL_KEEP_S)[-MAX_SIGNALS:],
        tuple(work.last_kill.items()),
        work.counted_at_s,
    )
    return work.out


def _take_incidents(
    work: _Work,
    incidents: Sequence[Incident],
    now_s: float,
    kernel_offset_s: float,
    grace_s: float,
    keep_s: float,
) -> None:
    """Reports pass on at once and wait for their rises; bare kills wait to be placed."""
    for incident in incidents:
        if not is_kernel_kill(incident):
            work.out.ready.append(incident)
            continue
        t_s = _mono(incident, kernel_offset_s)
        memcg = incident.oom_memcg or incident.task_memcg
        if memcg and t_s is not None:
            for row in incident.tasks:  # the kernel listed these pids in that memcg
                work.sightings.pop(row.pid, None)
                work.sightings[row.pid] = Sighting(row.pid, memcg, t_s)
        cgroup = _log_cgroup(incident)
        if cgroup is None:
            work.bare.append(BareKill(incident, now_s, now_s + grace_s))
            continue
        method: AttributionMethod = (
            "report" if incident.task_memcg or incident.oom_memcg else "group"
        )
        _attribute(incident, method, "certain", [cgroup], "named by the kernel's report")
        work.out.ready.append(incident)
        if t_s is not None:
            work.last_kill[cgroup] = max(work.last_kill.get(cgroup, t_s), t_s)
        for _ in range(max(1, len(incident.victims))):
            work.unmatched.append(LogKill(cgroup, incident.kernel_time_s, now_s + keep_s))


def _take_news(work: _Work, news: CgroupNews, now_s: float, grace_s: float) -> None:
    for delta in news.kills:
        for i in range(max(0, delta.oom_kill)):
            due = max(delta.observed_at_s, now_s) + grace_s
            group = i < delta.oom_group_kill
            work.rises.append(Rise(delta.cgroup, delta.since_s, delta.observed_at_s, due, group))
    work.signals.extend(news.signals)
    for sighting in news.sightings:
        work.sightings.pop(sighting.pid, None)
        work.sightings[sighting.pid] = sighting
    if news.counted_at_s is not None:
        work.counted_at_s = max(work.counted_at_s or news.counted_at_s, news.counted_at_s)


def _place(work: _Work, facts: CgroupFacts, now_s: float, kernel_offset_s: float) -> None:
    """Match every waiting kill to a rise at once; reports take their rise, and each bare
    kill whose place is decided is passed on with the rise its match gave it.

    Taking a kill and its matched rise out leaves a maximum matching of the rest, so what the
    others may take only narrows: the decisions of one round never contradict each other."""
    if work.rises and (work.unmatched or work.bare):
        kills = [
            WaitingKill(_REPORTED, _mono_time(k.kernel_time_s, kernel_offset_s), k.cgroup)
            for k in work.unmatched
        ]
        kills += [WaitingKill(b.incident, _mono(b.incident, kernel_offset_s)) for b in work.bare]
        found = options(kills, work.rises, work.witnesses(facts))
        reported, bare = found[: len(work.unmatched)], found[len(work.unmatched) :]
        taken = {o.assigned for o in reported if o.assigned is not None}
        work.unmatched = [
            k for k, o in zip(work.unmatched, reported, strict=True) if o.assigned is None
        ]
        held: set[int] = set()
        still: list[BareKill] = []
        for waiting, opts in zip(work.bare, bare, strict=True):
            rise = _decide(work, waiting, opts, now_s, kernel_offset_s)
            if rise is None:
                still.append(waiting)
                held.update(j for js in opts.rises.values() for j in js)
            else:
                taken.add(rise)
        work.bare = still
        kept = [j for j in range(len(work.rises)) if j not in taken]
        work.held = {n for n, j in enumerate(kept) if j in held}
        work.rises = [work.rises[j] for j in kept]
    for waiting in [b for b in work.bare if b.due_at_s <= now_s]:
        work.bare.remove(waiting)
        _attribute(
            waiting.incident, "none", "unknown", [],
            "no watched cgroup's oom_kill counter rose at the time of this kill",
        )
        work.out.ready.append(waiting.incident)


_REPORTED = Incident()  # stands in for a report's victim: its cgroup alone decides


def _decide(
    work: _Work, waiting: BareKill, opts: Options, now_s: float, kernel_offset_s: float
) -> int | None:
    """Pass on a bare kill whose place is decided; returns the rise it used up, or None."""
    counted = work.counted_at_s is not None and work.counted_at_s >= waiting.arrived_s
    cgroups = opts.cgroups
    if not counted or not cgroups or opts.assigned is None:
        return None
    if len(cgroups) > 1 and now_s < waiting.arrived_s + AMBIGUOUS_WAIT_S:
        return None
    incident = waiting.incident
    if len(cgroups) == 1:
        cgroup = cgroups[0]
        _attribute(incident, opts.method, "certain", cgroups, _why(opts.method))
        incident.task_memcg = cgroup
        t_s = _mono(incident, kernel_offset_s)
        if t_s is not None:
            work.last_kill[cgroup] = max(work.last_kill.get(cgroup, t_s), t_s)
        work.out.attributed += 1
    else:
        _attribute(incident, opts.method, "ambiguous", cgroups, _why_ambiguous(cgroups))
        work.out.ambiguous += 1
    work.out.ready.append(incident)
    return opts.assigned


def _expire(work: _Work, now_s: float, wall_offset_s: float | None) -> None:
    """Rises nothing explained in time (and no waiting kill may still take) become
    counter-only incidents; reports whose counter never came stop waiting."""
    kept: list[Rise] = []
    for n, rise in enumerate(work.rises):
        if rise.due_s > now_s or n in work.held:
            kept.append(rise)
            continue
        incident = missing_incident(rise.cgroup, group_kill=rise.group)
        if wall_offset_s is not None:
            incident.wall_time = iso_time(rise.by_s + wall_offset_s)
        work.out.ready.append(incident)
        work.out.missing += 1
    work.rises = kept
    work.unmatched = [k for k in work.unmatched if k.expires_at_s > now_s]


def _mono(incident: Incident, kernel_offset_s: float) -> float | None:
    return _mono_time(incident.kernel_time_s, kernel_offset_s)


def _mono_time(kernel_time_s: float | None, kernel_offset_s: float) -> float | None:
    return None if kernel_time_s is None else kernel_time_s - kernel_offset_s


def _attribute(
    incident: Incident,
    method: AttributionMethod,
    confidence: AttributionConfidence,
    cgroups: Sequence[str],
    reason: str,
) -> None:
    candidates = [AttributionCandidate(c) for c in cgroups]
    incident.attribution = Attribution(method, confidence, candidates, reason)


def _why(method: str) -> str:
    return {
        "pid_seen": "the victim's pid was seen in this cgroup before the kill",
        "oom_signal": "the only cgroup whose OOM notification and oom_kill counter fit the"
        " kill's time",
        "counter": "the only cgroup whose oom_kill counter rose at the kill's time",
    }.get(method, method)


def _why_ambiguous(cgroups: Sequence[str]) -> str:
    return (
        f"the kernel rate-limited this kill's report; {len(cgroups)} cgroups' oom_kill counters"
        " rose at its time and nothing the kernel printed tells them apart"
    )


def missing_incident(cgroup: str, *, group_kill: bool = False) -> Incident:
    """A kill the counters saw and the kernel log never reported: only the cgroup is known."""
    return Incident(
        kind="unknown",
        task_memcg=cgroup,
        kmsg_missing=True,
        group_kill=group_kill,
        group_cgroup=cgroup if group_kill else None,
        notes=[MISSING_NOTE],
        attribution=Attribution(
            "counter", "certain", [AttributionCandidate(cgroup)],
            "counted by this cgroup's oom_kill counter",
        ),
    )


__all__ = [
    "GRACE_S",
    "BareKill",
    "CgroupFacts",
    "CgroupNews",
    "CounterKills",
    "LogKill",
    "OomSignal",
    "ReconcileState",
    "Reconciled",
    "Rise",
    "Sighting",
    "covers",
    "is_kernel_kill",
    "missing_incident",
    "reconcile",
]
