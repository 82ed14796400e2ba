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
  with `kmsg_missing: true` -- `GRACE_S` counted from when the log was read past the rise
  (its line may wait behind a backlog the agent is still decoding), for at most
  `UNMATCHED_KEEP_S`.

Claims do not take a particular rise at once: a report or a placed kill may fit two rises of
its cgroup, and taking the wrong one would rob a later kill of its own; an ambiguous kill
fits rises of several cgroups, and taking one would make the next kill look certain.  A
claim settles on a rise only once that rise is `SETTLE_S` old and no kill waits, when no
later line can need it.  Counters stay the ground truth for how many kills there were: every
rise is explained by one claim or becomes a counter-only incident, never both.

Pure: state in, state out, no clock or I/O; all times are CLOCK_MONOTONIC seconds
(`KernelTime.offset_s` maps the kernel log's stamps onto that clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from oomwatch.cgroups.oom_events import Sighting
from oomwatch.incident import (
    Attribution,
    AttributionCandidate,
    AttributionMethod,
    Incident,
    is_kernel_kill,
    iso_time,
)
from oomwatch.reconcile.attribution import Rise, related
from oomwatch.reconcile.kernel_time import KernelTime
from oomwatch.reconcile.placement import attribute, mono, place
from oomwatch.reconcile.state import (
    GRACE_S,
    GROUP_REPEAT_S,
    MAX_CUT_REPORTS,
    MAX_GROUPS_IN_FLIGHT,
    MAX_SIGHTINGS,
    MAX_SIGNALS,
    MISSING_NOTE,
    SIGNAL_KEEP_S,
    UNMATCHED_KEEP_S,
    BareKill,
    CgroupFacts,
    CgroupNews,
    Claim,
    CounterKills,
    CutReport,
    GroupInFlight,
    Reconciled,
    ReconcileState,
    Work,
)


def is_logged_kernel_kill(incident: Incident) -> bool:
    """A kernel kill known from its log line (not only from a counter)."""
    return is_kernel_kill(incident.kind) and not incident.kmsg_missing


def _log_cgroup(incident: Incident) -> str | None:
    return incident.task_memcg or incident.oom_memcg or incident.group_cgroup


def reconcile(
    state: ReconcileState,
    incidents: Sequence[Incident],
    news: CgroupNews | Iterable[CounterKills],
    now_s: float,
    *,
    facts: CgroupFacts | None = None,
    kernel_time: KernelTime | None = None,
    grace_s: float = GRACE_S,
    unmatched_keep_s: float = UNMATCHED_KEEP_S,
    wall_offset_s: float | None = None,
) -> Reconciled:
    """Fold new log incidents and cgroup news into the state; return what is ready.

    Call with no new input on each tick so waiting kills reach their deadline.
    `kernel_time` is the kernel log's clock (offset, lateness, read-through) as of this call
    (None: `KernelTime()`, stamps on CLOCK_MONOTONIC, read through now); `wall_offset_s`
    (wall clock minus CLOCK_MONOTONIC) dates counter-only kills.
    """
    kernel_time = kernel_time or KernelTime()
    kernel_offset_s = kernel_time.offset_s
    log_read_at_s = kernel_time.read_through_s
    if not isinstance(news, CgroupNews):
        news = CgroupNews(kills=tuple(news))
    work = Work(
        list(state.claims),
        list(state.rises),
        list(state.bare),
        {s.pid: s for s in state.sightings},
        list(state.signals),
        state.counted_at_s,
        Reconciled(state),
        unmatched_keep_s,
        now_s if log_read_at_s is None else log_read_at_s,
        groups={g.cgroup: g for g in state.groups},
        cut=list(state.cut),
    )
    _take_incidents(work, incidents, now_s, kernel_offset_s, grace_s)
    _take_news(work, news, now_s, grace_s)
    place(work, facts or CgroupFacts(), now_s, kernel_offset_s, kernel_time.late_s)
    _expire(work, now_s, wall_offset_s, grace_s)
    work.out.state = ReconcileState(
        tuple(work.claims),
        tuple(work.rises),
        tuple(work.bare),
        tuple(sorted(work.sightings.values(), key=lambda s: s.at_s))[-MAX_SIGHTINGS:],
        tuple(s for s in work.signals if s.by_s > now_s - SIGNAL_KEEP_S)[-MAX_SIGNALS:],
        work.counted_at_s,
        state.kernel_offset_s if kernel_offset_s is None else round(kernel_offset_s, 3),
        tuple(work.groups.values())[-MAX_GROUPS_IN_FLIGHT:],
        tuple(work.cut[-MAX_CUT_REPORTS:]),
    )
    return work.out


def _take_incidents(
    work: Work,
    incidents: Sequence[Incident],
    now_s: float,
    kernel_offset_s: float | None,
    grace_s: float,
) -> None:
    """Reports pass on at once and claim their rises; bare kills wait to be placed."""
    for incident in incidents:
        if not is_logged_kernel_kill(incident):
            work.out.ready.append(incident)
            continue
        t_s = mono(incident, kernel_offset_s)
        memcg = incident.oom_memcg or incident.task_memcg
        if memcg and t_s is not None:
            for row in incident.tasks:  # the kernel listed these pids in that memcg
                work.sightings.pop(row.pid, None)
                work.sightings[row.pid] = Sighting(row.pid, memcg, t_s)
        cgroup = _log_cgroup(incident)
        if cgroup is None and _completes_a_cut_report(work, incident):
            continue
        if cgroup is None and _repeats_a_group_kill(work, incident, now_s):
            continue
        if cgroup is None:
            work.bare.append(BareKill(incident, now_s, now_s + grace_s))
            continue
        method: AttributionMethod = (
            "report" if incident.task_memcg or incident.oom_memcg else "group"
        )
        attribute(incident, method, "certain", [cgroup], "named by the kernel's report")
        work.out.ready.append(incident)
        if incident.group_kill:
            _group_piece(work, incident.group_cgroup or cgroup, now_s)
        last_s = incident.last_kill_kernel_time_s
        pids = tuple(v.pid for v in incident.victims) if incident.group_kill else ()
        # closed at a pause before its kill line (none counted or stamped), after the
        # summary named the victim (no summary: nothing may have been killed)
        victim = incident.victim
        line = incident.kills_counted is not None or last_s is not None or victim is None
        if not line and victim is not None and incident.kernel_time_s is not None:
            work.cut.append(CutReport(victim.pid, incident.kernel_time_s, now_s + work.keep_s))
        for _ in range(incident.kills_counted or max(1, len(incident.victims))):
            claim = Claim(
                (cgroup,), incident.kernel_time_s, now_s + work.keep_s, now_s, last_s, pids, line
            )
            work.claims.append(claim)


def _group_piece(work: Work, cgroup: str, now_s: float) -> None:
    """A group kill's counter, report, or a piece of its members that came after a pause:
    the group's rises wait while more may come (`GroupInFlight`)."""
    group = work.groups.pop(cgroup, None)
    if group is None or not group.waits(now_s, work.log_read_at_s):
        group = GroupInFlight(cgroup, now_s, now_s)
    work.groups[cgroup] = GroupInFlight(cgroup, group.first_s, now_s)


def _completes_a_cut_report(work: Work, incident: Incident) -> bool:
    """The bare kill line of a report passed on without it (`CutReport`): the same kill,
    already counted by the report's claim.  The kernel prints it after the report's last
    line, within `UNMATCHED_KEEP_S` (a pid is reused in time)."""
    victim, t = incident.victim, incident.kernel_time_s
    if victim is None or t is None:
        return False
    for cut in work.cut:
        if cut.pid == victim.pid and 0.0 <= t - cut.kernel_time_s <= work.keep_s:
            work.cut.remove(cut)
            work.out.late_lines += 1
            return True
    return False


def _repeats_a_group_kill(work: Work, incident: Incident, now_s: float) -> bool:
    """A header-less kill line of a victim of a group kill already passed on: the kernel
    kills the primary victim again as a member (mm/oom_kill.c oom_kill_memcg_member), and a
    report closed before that line came (its lines more than `GROUP_KILL_IDLE_S` apart)
    leaves it alone.  No process is killed twice otherwise (a victim is skipped while it
    exits), so it is the group kill's, and counted: it claims a rise of that cgroup.  Only
    within `GROUP_REPEAT_S` of the group's kill (a pid is reused in time)."""
    victim, t = incident.victim, incident.kernel_time_s
    group = next(
        (
            c
            for c in work.claims
            if victim is not None
            and victim.pid in c.victim_pids
            and t is not None
            and c.kernel_time_s is not None
            and 0.0 <= t - c.kernel_time_s <= GROUP_REPEAT_S
        ),
        None,
    )
    if group is None:
        return False
    claim = Claim(group.cgroups, incident.kernel_time_s, now_s + work.keep_s, now_s)
    work.claims.append(claim)
    work.out.repeats += 1
    return True


def _take_news(work: Work, news: CgroupNews, now_s: float, grace_s: float) -> None:
    for delta in news.kills:
        if delta.oom_group_kill > 0:  # the kernel is printing a group kill's members
            _group_piece(work, delta.cgroup, delta.observed_at_s)
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


def _expire(work: Work, now_s: float, wall_offset_s: float | None, grace_s: float) -> None:
    """Rises no claim or waiting kill may take, unexplained in time, become counter-only
    incidents; claims whose counter never came stop waiting.

    The kernel prints a kill's line right after its counter moves, but the agent may read
    it much later: a rise the log has not been read past waits (its due moves on) until it
    has, and `grace_s` more, so a line read late behind a backlog is matched, not doubled.
    A rise in a cgroup whose group kill may still be printing members waits for them
    (`GroupInFlight`): it is counter-only only once they stop coming."""
    kept: list[Rise] = []
    read_s = work.log_read_at_s
    work.groups = {c: g for c, g in work.groups.items() if g.waits(now_s, read_s)}
    printing: dict[str, bool] = {}  # rise cgroup -> a group kill there may still print lines
    for n, rise in enumerate(work.rises):
        if rise.due_s > now_s or n in work.held:
            kept.append(rise)
            continue
        waits = printing.get(rise.cgroup)
        if waits is None:
            waits = printing[rise.cgroup] = any(related(rise.cgroup, c) for c in work.groups)
        if waits:  # its due has passed: it expires as soon as the group's lines stop
            kept.append(rise)
            continue
        if read_s is not None and read_s < rise.by_s and now_s < rise.by_s + work.keep_s:
            kept.append(replace(rise, due_s=now_s + grace_s))
            continue
        incident = missing_incident(rise.cgroup, group_kill=rise.group)
        if wall_offset_s is not None:
            incident.wall_time = iso_time(rise.by_s + wall_offset_s)
        work.out.ready.append(incident)
        work.out.missing += 1
    work.rises = kept
    work.claims = [c for c in work.claims if c.expires_at_s > now_s]
    work.cut = [c for c in work.cut if c.expires_at_s > now_s]


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
            "counter",
            "certain",
            [AttributionCandidate(cgroup)],
            "counted by this cgroup's oom_kill counter",
        ),
    )
