"""Reconcile kernel-log kills with the cgroup OOM counters: every counted kill recorded once.

Two witnesses see each kill.  The kernel log tells who died and why, but its report header
is rate-limited (later kills print only a bare `Killed process` line, with no cgroup) and
records can be overwritten before we read them.  The `oom_kill` counter of the victim's
cgroup cannot lie or be lost, but says nothing else.  Matching the two:

- a full report is passed on at once (latency matters) and waits to be matched by a
  counter increase of its cgroup (or an ancestor, for hierarchical v2 counters);
- a bare `Killed process` line waits for an unexplained counter increase and takes that
  cgroup (preferring a cgroup whose earlier task table listed the pid, then one that listed
  a task of the victim's name: after a restart many counters move at once);
- a counter increase that no log kill explains within `grace_s` becomes an incident of its
  own with `kmsg_missing: true`.

Pure: state in, state out, no clock or I/O; all times are CLOCK_MONOTONIC seconds (the
clock of the kernel log's timestamps and of `CounterDelta.observed_at_s`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from oomwatch.incident import Incident, iso_time

KERNEL_KILL_KINDS = frozenset({"memcg", "global", "cpuset", "mempolicy", "unknown"})
GRACE_S = 2.5  # longer than one counter poll (1 s) plus the assembler's flush delay
# A log kill's counter may never come (cgroup not watched, or gone); a cgroup made just
# before its kill is found by the watcher's next rescan (every 10 s), which reads its
# counter from zero: keep the log kill longer than that so it is matched, not doubled.
UNMATCHED_KEEP_S = 30.0
CLOCK_SLACK_S = 0.5  # the kernel stamps a record before the counter we read can move
MAX_KNOWN_PIDS = 4096
ATTRIBUTED_NOTE = "cgroup attributed from the cgroup's oom_kill counter (report header suppressed)"
ATTRIBUTED_BY_PID_NOTE = "cgroup attributed from an earlier task table listing this pid"
Names = tuple[str, str]  # (task name, memcg) a task table listed
MISSING_NOTE = (
    "kill counted by the cgroup's oom_kill counter; its kernel report never arrived"
    " (wall_time is when the counter showed it)"
)


@dataclass(frozen=True, slots=True)
class CounterKills:
    """Kills one counter read showed (from a `CounterDelta`: its cgroup and `oom_kill`)."""

    cgroup: str
    oom_kill: int
    observed_at_s: float
    oom_group_kill: int = 0


@dataclass(frozen=True, slots=True)
class LogKill:
    """One victim of a full kernel report, waiting for the counter increase that explains it."""

    cgroup: str
    kernel_time_s: float | None
    expires_at_s: float


@dataclass(frozen=True, slots=True)
class OwedKills:
    """Kills a counter showed that no log record has explained yet."""

    cgroup: str
    count: int
    group_kills: int
    observed_at_s: float
    due_at_s: float


@dataclass(frozen=True, slots=True)
class BareKill:
    """A header-suppressed kill (no cgroup in the log), waiting for a counter to place it."""

    incident: Incident
    due_at_s: float


@dataclass(frozen=True, slots=True)
class ReconcileState:
    unmatched: tuple[LogKill, ...] = ()
    owed: tuple[OwedKills, ...] = ()
    bare: tuple[BareKill, ...] = ()
    # pid -> the memcg whose task table listed it (newest last, bounded)
    known_pids: tuple[tuple[int, str], ...] = ()
    # (task name, memcg) pairs task tables listed (newest last, bounded)
    known_names: tuple[Names, ...] = ()

    @property
    def quiet(self) -> bool:
        """Nothing is waiting: every kill seen so far is matched or given up on."""
        return not (self.unmatched or self.owed or self.bare)

    @property
    def waiting_incidents(self) -> list[Incident]:
        """Incidents held back (bare kills not yet placed)."""
        return [b.incident for b in self.bare]


@dataclass(slots=True)
class Reconciled:
    state: ReconcileState
    ready: list[Incident] = field(default_factory=list)  # pass on down the pipeline now
    attributed: int = 0  # bare kills placed by a counter
    missing: int = 0  # kills known only from counters


def is_kernel_kill(incident: Incident) -> bool:
    return incident.kind in KERNEL_KILL_KINDS and not incident.kmsg_missing


def _covers(counter_cgroup: str, kill_cgroup: str) -> bool:
    """A counter of `counter_cgroup` counts kills in it and (v2) below it."""
    return kill_cgroup == counter_cgroup or kill_cgroup.startswith(counter_cgroup.rstrip("/") + "/")


def _related(a: str, b: str) -> bool:
    return _covers(a, b) or _covers(b, a)


def _log_cgroup(incident: Incident) -> str | None:
    return incident.task_memcg or incident.oom_memcg


def reconcile(
    state: ReconcileState,
    incidents: Sequence[Incident],
    deltas: Iterable[CounterKills],
    now_s: float,
    *,
    grace_s: float = GRACE_S,
    unmatched_keep_s: float = UNMATCHED_KEEP_S,
    wall_offset_s: float | None = None,
) -> Reconciled:
    """Fold new log incidents and counter deltas into the state; return what is ready.

    Call with no new input on each tick so waiting kills reach their deadline.
    `wall_offset_s` (wall clock minus CLOCK_MONOTONIC) dates counter-only kills.
    """
    out = Reconciled(state)
    unmatched = list(state.unmatched)
    owed = list(state.owed)
    bare = list(state.bare)
    known = dict(state.known_pids)
    names = state.known_names

    for incident in incidents:
        if not is_kernel_kill(incident):
            out.ready.append(incident)
            continue
        memcg = incident.oom_memcg or incident.task_memcg
        for row in incident.tasks:
            if memcg:
                known.pop(row.pid, None)
                known[row.pid] = memcg
        if memcg and incident.tasks:
            listed = dict.fromkeys((row.name, memcg) for row in incident.tasks)
            names = (*(n for n in names if n not in listed), *listed)[-MAX_KNOWN_PIDS:]
        cgroup = _log_cgroup(incident)
        if cgroup is None:
            placed = _place_bare(incident, owed, known, names)
            if placed:
                out.attributed += 1
                out.ready.append(incident)
            else:
                bare.append(BareKill(incident, now_s + grace_s))
            continue
        out.ready.append(incident)
        for _ in range(incident.kills_counted or max(1, len(incident.victims))):
            if not _take_owed(owed, cgroup):
                unmatched.append(LogKill(cgroup, incident.kernel_time_s, now_s + unmatched_keep_s))

    counted: list[CounterKills] = []
    left: list[int] = []  # per counted delta: the kills no log kill explained yet
    for delta in deltas:
        count = delta.oom_kill
        if count <= 0:
            continue
        latest_s = delta.observed_at_s + CLOCK_SLACK_S
        for kill in sorted(unmatched, key=lambda k: k.kernel_time_s or 0.0):
            if count == 0:
                break
            if _covers(delta.cgroup, kill.cgroup) and (kill.kernel_time_s or 0.0) <= latest_s:
                unmatched.remove(kill)
                count -= 1
        counted.append(delta)
        left.append(count)
    out.attributed += _place_bare_by_counters(bare, counted, left, known, names, out.ready)
    for delta, count in zip(counted, left, strict=True):
        if count > 0:
            group = min(delta.oom_group_kill, count)
            owed.append(
                OwedKills(delta.cgroup, count, group, delta.observed_at_s, now_s + grace_s)
            )

    for debt in [d for d in owed if d.due_at_s <= now_s]:
        owed.remove(debt)
        seen = None if wall_offset_s is None else iso_time(debt.observed_at_s + wall_offset_s)
        for i in range(debt.count):
            incident = missing_incident(debt.cgroup, group_kill=i < debt.group_kills)
            incident.wall_time = seen
            out.ready.append(incident)
            out.missing += 1
    for waiting in [b for b in bare if b.due_at_s <= now_s]:
        bare.remove(waiting)
        victim = waiting.incident.victim
        memcg = known.get(victim.pid) if victim else None
        if memcg is not None:
            _attribute(waiting.incident, memcg, ATTRIBUTED_BY_PID_NOTE)
            out.attributed += 1
        out.ready.append(waiting.incident)
    unmatched = [k for k in unmatched if k.expires_at_s > now_s]

    pids = tuple(known.items())[-MAX_KNOWN_PIDS:]
    out.state = ReconcileState(tuple(unmatched), tuple(owed), tuple(bare), pids, names)
    return out


def _take_owed(owed: list[OwedKills], cgroup: str) -> bool:
    """Settle one owed kill of a counter covering `cgroup` (deepest counter first)."""
    candidates = [d for d in owed if _covers(d.cgroup, cgroup)]
    if not candidates:
        return False
    debt = max(candidates, key=lambda d: (d.cgroup.count("/"), -d.observed_at_s))
    index = owed.index(debt)
    if debt.count > 1:
        owed[index] = replace(
            debt, count=debt.count - 1, group_kills=min(debt.group_kills, debt.count - 1)
        )
    else:
        del owed[index]
    return True


def _place_bare(
    incident: Incident, owed: list[OwedKills], known: Mapping[int, str], names: tuple[Names, ...]
) -> bool:
    """A bare kill arriving after its counter: take an owed kill, the likeliest cgroup first."""
    if not owed:
        return False
    places = _hint(incident, known, names)
    debt = min(owed, key=lambda d: (_rank(places, d.cgroup), d.observed_at_s))
    _take_owed(owed, debt.cgroup)
    _attribute(incident, debt.cgroup, ATTRIBUTED_NOTE)
    return True


def _place_bare_by_counters(
    bare: list[BareKill],
    counted: list[CounterKills],
    left: list[int],
    known: Mapping[int, str],
    names: tuple[Names, ...],
    ready: list[Incident],
) -> int:
    """Counter increases take the waiting bare kills they most likely explain, the
    likeliest (cgroup, kill) pairs first across all counters: after a restart many move at
    once, and a greedy counter-by-counter pick would take a kill another one explains."""
    if not bare or not counted:
        return 0
    hints = [_hint(b.incident, known, names) for b in bare]
    pairs = sorted(
        (_rank(hints[i], delta.cgroup), b.incident.kernel_time_s or 0.0, i, j)
        for j, delta in enumerate(counted)
        for i, b in enumerate(bare)
        if (b.incident.kernel_time_s or 0.0) <= delta.observed_at_s + CLOCK_SLACK_S
    )
    taken: set[int] = set()
    for _, _, i, j in pairs:
        if i in taken or not left[j]:
            continue
        taken.add(i)
        left[j] -= 1
        _attribute(bare[i].incident, counted[j].cgroup, ATTRIBUTED_NOTE)
        ready.append(bare[i].incident)
    bare[:] = [b for i, b in enumerate(bare) if i not in taken]
    return len(taken)


def _hint(
    incident: Incident, known: Mapping[int, str], names: tuple[Names, ...]
) -> tuple[bool, list[str]]:
    """Where earlier task tables place a bare kill's victim: (by its pid?, those memcgs)."""
    victim = incident.victim
    if victim is None:
        return False, []
    listed = known.get(victim.pid)
    if listed is not None:
        return True, [listed]
    return False, [memcg for name, memcg in names if name == victim.comm]


def _rank(hint: tuple[bool, list[str]], cgroup: str) -> int:
    """0 pid listed here, 1 name listed here, 2 no hint, 3 name elsewhere, 4 pid elsewhere."""
    by_pid, places = hint
    if not places:
        return 2
    if any(_related(cgroup, memcg) for memcg in places):
        return 0 if by_pid else 1
    return 4 if by_pid else 3


def _attribute(incident: Incident, cgroup: str, note: str) -> None:
    incident.task_memcg = cgroup
    incident.notes.append(note)


def missing_incident(cgroup: str, *, group_kill: bool = False) -> Incident:
    """A kill the counters saw and the kernel log never reported: only the cgroup is known."""
    return Incident(
        kind="unknown",
        task_memcg=cgroup,
        kmsg_missing=True,
        group_kill=group_kill,
        group_cgroup=cgroup if group_kill else None,
        notes=[MISSING_NOTE],
    )
