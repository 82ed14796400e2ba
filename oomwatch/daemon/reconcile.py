"""Reconcile kernel-log kills with the cgroup OOM counters: every counted kill recorded once,
in the cgroup the kernel's evidence names -- or said to be ambiguous, never guessed.

Two witnesses see each kill.  The kernel log tells who died and why, but its report header is
rate-limited (later kills print only a bare `Killed process` line, with no cgroup) and records
can be overwritten before we read them.  The `oom_kill` counter of the victim's cgroup cannot
lie or be lost, but says nothing else.  Matching the two:

- a full report is passed on at once (latency matters) and leaves a claim on a counter rise
  of its cgroup (or an ancestor, for hierarchical v2 counters);
- a bare `Killed process` line waits until a counter pass that began after it arrived, then
  `attribution.options` tells which cgroups the evidence allows (counter rises bracketing its
  time, OOM notifications before it, its pid seen in a cgroup, its size against the limit),
  jointly with every other kill still waiting: one cgroup -> placed; several -> it waits
  `AMBIGUOUS_WAIT_S` for evidence still in flight, then is passed on as ambiguous, naming
  them; none -> it waits `GRACE_S` for a rescan to find its cgroup, then is passed on with
  its cgroup unknown.  A placed or ambiguous kill leaves a claim like a report's;
- a counter rise that no log kill explains within `GRACE_S` becomes an incident of its own
  with `kmsg_missing: true`.

Claims do not take a particular rise at once: a report or a placed kill may fit two rises of
its cgroup, and taking the wrong one would rob a later kill of its own; an ambiguous kill
fits rises of several cgroups, and taking one would make the next kill look certain.  A
claim settles on a rise only once that rise is `SETTLE_S` old and no kill waits, when no
later line can need it.  Counters stay the ground truth for how many kills there were: every
rise is explained by one claim or becomes a counter-only incident, never both.

Pure: state in, state out, no clock or I/O; all times are CLOCK_MONOTONIC seconds
(`kernel_offset_s` maps the kernel log's stamps onto that clock).
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
# A rise this old can no longer be a kill whose line has not arrived yet (the kernel prints
# the line right after the counter bump): claims may settle on it.
SETTLE_S = 1.0
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

    limits_bytes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Claim:
    """A kill already passed on, waiting to settle on a counter rise of one of `cgroups`
    (a report's or a placed kill's one cgroup; an ambiguous kill's candidates)."""

    cgroups: tuple[str, ...]
    kernel_time_s: float | None
    expires_at_s: float
    arrived_s: float = float("-inf")  # when its line came (it waits for a pass after)


@dataclass(frozen=True, slots=True)
class BareKill:
    """A header-suppressed kill (no cgroup in the log), waiting to be placed."""

    incident: Incident
    arrived_s: float
    due_at_s: float


@dataclass(frozen=True, slots=True)
class ReconcileState:
    claims: tuple[Claim, ...] = ()
    rises: tuple[Rise, ...] = ()
    bare: tuple[BareKill, ...] = ()
    sightings: tuple[Sighting, ...] = ()  # newest last, bounded
    signals: tuple[OomSignal, ...] = ()  # newest last, bounded
    counted_at_s: float | None = None
    # the kernel log's clock minus CLOCK_MONOTONIC (ms), kept so a restart on this boot
    # knows it before the first live record
    kernel_offset_s: float | None = None

    @property
    def quiet(self) -> bool:
        """Nothing is waiting: every kill seen so far is matched or given up on."""
        return not (self.claims or self.rises or self.bare)

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

    claims: list[Claim]
    rises: list[Rise]
    bare: list[BareKill]
    sightings: dict[int, Sighting]
    signals: list[OomSignal]
    counted_at_s: float | None
    out: Reconciled
    keep_s: float = UNMATCHED_KEEP_S
    held: set[int] = field(default_factory=set)  # rises some claim or waiting kill may take
    taken: set[int] = field(default_factory=set)  # rises settled claims took

    def counted(self, arrived_s: float) -> bool:
        """Whether a counter pass began after a kill arrived (its rise is then seen)."""
        return self.counted_at_s is not None and self.counted_at_s >= arrived_s

    def hold(self, opts: Options) -> None:
        self.held.update(j for js in opts.rises.values() for j in js)

    def drop_taken(self) -> None:
        """Remove the taken rises, renumbering the held ones."""
        kept = [j for j in range(len(self.rises)) if j not in self.taken]
        self.held = {n for n, j in enumerate(kept) if j in self.held}
        self.rises = [self.rises[j] for j in kept]
        self.taken = set()

    def witnesses(self, facts: CgroupFacts) -> Witnesses:
        by_cgroup: dict[str, list[OomSignal]] = {}
        for signal in self.signals:
            by_cgroup.setdefault(signal.cgroup, []).append(signal)
        return Witnesses(
            signals={c: tuple(s) for c, s in by_cgroup.items()},
            sightings=self.sightings,
            limits_bytes=facts.limits_bytes,
        )


def reconcile(
    state: ReconcileState,
    incidents: Sequence[Incident],
    news: CgroupNews | Iterable[CounterKills],
    now_s: float,
    *,
    facts: CgroupFacts | None = None,
    kernel_offset_s: float | None = 0.0,
    grace_s: float = GRACE_S,
    unmatched_keep_s: float = UNMATCHED_KEEP_S,
    wall_offset_s: float | None = None,
) -> Reconciled:
    """Fold new log incidents and cgroup news into the state; return what is ready.

    Call with no new input on each tick so waiting kills reach their deadline.
    `kernel_offset_s` is the kernel log's clock minus CLOCK_MONOTONIC (None: not known yet;
    then no kill is placed by its time); `wall_offset_s` (wall clock minus CLOCK_MONOTONIC)
    dates counter-only kills.
    """
    if not isinstance(news, CgroupNews):
        news = CgroupNews(kills=tuple(news))
    work = _Work(
        list(state.claims),
        list(state.rises),
        list(state.bare),
        {s.pid: s for s in state.sightings},
        list(state.signals),
        state.counted_at_s,
        Reconciled(state),
        unmatched_keep_s,
    )
    _take_incidents(work, incidents, now_s, kernel_offset_s, grace_s)
    _take_news(work, news, now_s, grace_s)
    _place(work, facts or CgroupFacts(), now_s, kernel_offset_s)
    _expire(work, now_s, wall_offset_s)
    work.out.state = ReconcileState(
        tuple(work.claims),
        tuple(work.rises),
        tuple(work.bare),
        tuple(sorted(work.sightings.values(), key=lambda s: s.at_s))[-MAX_SIGHTINGS:],
        tuple(s for s in work.signals if s.by_s > now_s - SIGNAL_KEEP_S)[-MAX_SIGNALS:],
        work.counted_at_s,
        state.kernel_offset_s if kernel_offset_s is None else round(kernel_offset_s, 3),
    )
    return work.out


def _take_incidents(
    work: _Work,
    incidents: Sequence[Incident],
    now_s: float,
    kernel_offset_s: float | None,
    grace_s: float,
) -> None:
    """Reports pass on at once and claim their rises; bare kills wait to be placed."""
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
        for _ in range(max(1, len(incident.victims))):
            work.claims.append(
                Claim((cgroup,), incident.kernel_time_s, now_s + work.keep_s, now_s)
            )


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


def _place(
    work: _Work, facts: CgroupFacts, now_s: float, kernel_offset_s: float | None
) -> None:
    """Decide the bare kills the evidence now decides (each becomes a claim), settle the
    claims whose rises no later kill can need, and note which rises are still wanted.

    Only kills with a counter pass since they arrived take part: their own rise is then
    among the rises (the kernel bumps the counter before it prints the line).  A kill whose
    rise may still be on its way would take another's and make a third look certain."""
    arrivals = [c.arrived_s for c in work.claims] + [b.arrived_s for b in work.bare]
    uncounted = any(not work.counted(arrived) for arrived in arrivals)
    work.held = set(range(len(work.rises))) if uncounted else set()  # it may take any
    if work.rises and (work.claims or work.bare):
        found = _options(work, facts, kernel_offset_s)
        still: list[BareKill] = []
        for bare in work.bare:
            opts = found.get(id(bare))
            if opts is None or not _decide(work, bare, opts, now_s):
                still.append(bare)
        if len(still) < len(work.bare):  # the new claims take part in the matching now
            work.bare = still
            found = _options(work, facts, kernel_offset_s)
        _settle(work, found, now_s)
        for bare in work.bare:
            opts = found.get(id(bare))
            if opts is not None:
                work.hold(opts)
        work.drop_taken()
    for waiting_kill in [b for b in work.bare if b.due_at_s <= now_s]:
        work.bare.remove(waiting_kill)
        _attribute(
            waiting_kill.incident, "none", "unknown", [],
            "no watched cgroup's oom_kill counter rose at the time of this kill",
        )
        work.out.ready.append(waiting_kill.incident)


def _options(
    work: _Work, facts: CgroupFacts, kernel_offset_s: float | None
) -> dict[int, Options]:
    """Options of every counted claim and waiting bare kill, from one joint matching;
    keyed by the `id()` of the claim or bare kill."""
    keys: list[int] = []
    kills: list[WaitingKill] = []
    for claim in work.claims:
        if work.counted(claim.arrived_s):
            keys.append(id(claim))
            t_s = _mono_time(claim.kernel_time_s, kernel_offset_s)
            kills.append(WaitingKill(_CLAIMED, t_s, claim.cgroups))
    for bare in work.bare:
        if work.counted(bare.arrived_s):
            keys.append(id(bare))
            kills.append(WaitingKill(bare.incident, _mono(bare.incident, kernel_offset_s)))
    return dict(zip(keys, options(kills, work.rises, work.witnesses(facts)), strict=True))


_CLAIMED = Incident()  # stands in for a claimed kill: its cgroups alone decide


def _settle(work: _Work, found: dict[int, Options], now_s: float) -> None:
    """Claims take their matched rise once it is `SETTLE_S` old and no bare kill waits
    (settling one of several equal choices must not narrow what a waiting kill may be)."""
    kept: list[Claim] = []
    for claim in work.claims:
        opts = found.get(id(claim))
        rise = None if opts is None else opts.assigned
        if (
            rise is not None
            and not work.bare
            and not work.held
            and work.rises[rise].by_s <= now_s - SETTLE_S
        ):
            work.taken.add(rise)
            continue
        kept.append(claim)
        if opts is not None:
            work.hold(opts)
    work.claims = kept


def _decide(work: _Work, waiting: BareKill, opts: Options, now_s: float) -> bool:
    """Pass on a bare kill whose place is decided, leaving its claim; False if not yet."""
    cgroups = opts.cgroups
    if not cgroups or opts.assigned is None:
        return False
    if len(cgroups) > 1 and now_s < waiting.arrived_s + AMBIGUOUS_WAIT_S:
        return False
    incident = waiting.incident
    if len(cgroups) == 1:
        _attribute(incident, opts.method, "certain", cgroups, _why(opts.method))
        incident.task_memcg = cgroups[0]
        work.out.attributed += 1
    else:
        _attribute(incident, opts.method, "ambiguous", cgroups, _why_ambiguous(cgroups))
        work.out.ambiguous += 1
    work.out.ready.append(incident)
    expires = now_s + work.keep_s
    work.claims.append(Claim(tuple(cgroups), incident.kernel_time_s, expires, waiting.arrived_s))
    return True


def _expire(work: _Work, now_s: float, wall_offset_s: float | None) -> None:
    """Rises no claim or waiting kill may take, unexplained in time, become counter-only
    incidents; claims whose counter never came stop waiting."""
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
    work.claims = [c for c in work.claims if c.expires_at_s > now_s]


def _mono(incident: Incident, kernel_offset_s: float | None) -> float | None:
    return _mono_time(incident.kernel_time_s, kernel_offset_s)


def _mono_time(kernel_time_s: float | None, kernel_offset_s: float | None) -> float | None:
    if kernel_time_s is None or kernel_offset_s is None:
        return None
    return kernel_time_s - kernel_offset_s


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
        "oom_signal": "the only cgroup whose oom_kill counter rose at the kill's time (dated to"
        " milliseconds after its OOM notification)",
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
    "Claim",
    "CounterKills",
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
