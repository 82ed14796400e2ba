"""Which cgroup a header-less kill belongs to, from the kernel's evidence alone -- or "ambiguous".

When the kernel rate-limits an OOM report (`oom_rs` in `mm/oom_kill.c`: 10 per 5 s), the
kill prints only `Killed process <pid> (<comm>) ...`: no cgroup.  The kernel still leaves
other witnesses, each with a time on the clock of the kernel log:

- the victim cgroup's `oom_kill` counter, bumped just before the kill line is printed
  (`__oom_kill_process`: `memcg_memory_event_mm(mm, MEMCG_OOM_KILL)` then `pr_err`); the
  agent reads it often enough to know when it still showed the old value (`Rise.after_s`)
  and when the kill (`Rise.by_s`);
- the cgroup's OOM notification (v1 eventfd on `memory.oom_control`, v2 the `oom` count of
  `memory.events`), fired when the OOM began (`memcg1_oom_prepare` -> `mem_cgroup_oom_notify`,
  then `mem_cgroup_out_of_memory`), after which the agent reads that counter every 2 ms, so
  the rise is dated to milliseconds.  It is no constraint of its own: a task that finds the
  memcg's OOM lock taken does not notify and may still kill after the holder's kill, so a
  kill need not have a notification since the cgroup's previous kill;
- the victim's pid in the cgroup: listed by an earlier report's task table or seen in its
  `cgroup.procs` (a killed process is moved out of its cgroup as it exits, so only a sighting
  from before the kill counts);
- the victim's charged memory (`anon-rss`), which cannot exceed its cgroup's limit.

A kill can belong to a cgroup only if all witnesses agree (`fits`).  Kills that wait together
compete for the same counter rises, so a cgroup is left possible for a kill only if some
assignment of every waiting kill to its own rise uses it (a bipartite matching).  One cgroup
left: the kill is placed.  Two or more: the evidence cannot separate them and the caller says
so.  Pure: no clock, no I/O; all times are CLOCK_MONOTONIC seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from oomwatch.cgroups.oom_events import HOT_WINDOW_S, OomSignal, Sighting
from oomwatch.incident import AttributionMethod, Incident

# Kernel log stamps are converted to CLOCK_MONOTONIC with an estimated offset that is never
# too large (`KernelClock`): a converted kill time is late by the smallest read delay the
# agent saw, which on a loaded node can be tens of milliseconds.  So a rise is ruled out as
# "seen before the kill" only by a wide margin (`LATE_SLACK_S`), and as "seen unchanged after
# it" by a narrow one (`TIME_SLACK_S`: the counter bump and the kill line's stamp are
# microseconds apart unless the killing task is preempted between them).
TIME_SLACK_S = 0.005
LATE_SLACK_S = 0.050
# A pid seen longer ago may be another process now: pid_max is 32768 on many nodes, and a
# busy one wraps it in minutes.  Processes near their limit are looked at every sample.
SIGHTING_MAX_AGE_S = 30.0
# A victim's anon-rss counts the pages it maps, charged where they were first touched: a
# process moved in from another cgroup, or COW pages shared with a parent elsewhere, can map
# more than its cgroup holds.  Only a victim far larger than a limit rules that cgroup out.
# The slack covers a runtime's start-up heap charged before it joined: on Debian 6.1 (lab
# VM) forked children of a Python that joined a 16 MiB cgroup after starting died with
# anon-rss 21.5 MiB, past 1 MiB of slack -- their only counter was ruled out, and each kill
# was recorded twice (cgroup unknown, and counter-only).
LIMIT_MARGIN = 1.25
LIMIT_SLACK_BYTES = 32 << 20
MAX_MATCHING_KILLS = 64  # beyond this, candidates come from each kill's own evidence alone


@dataclass(frozen=True, slots=True)
class Rise:
    """One kill that a cgroup's `oom_kill` counter counted and no log record explained yet."""

    cgroup: str
    after_s: float | None  # the counter still showed the old value then (None: unknown)
    by_s: float  # ... and showed this kill by then
    due_s: float  # unexplained after this: the kill's report never came
    group: bool = False  # counted together with an `oom_group_kill`


@dataclass(frozen=True, slots=True)
class Witnesses:
    """What the agent saw of the cgroups, besides the counters."""

    signals: Mapping[str, tuple[OomSignal, ...]] = field(default_factory=dict)
    sightings: Mapping[int, Sighting] = field(default_factory=dict)  # newest per pid
    limits_bytes: Mapping[str, int] = field(default_factory=dict)  # effective memory limit


@dataclass(frozen=True, slots=True)
class WaitingKill:
    """A kill waiting for the counter rise that explains it: its incident, its time on the
    clock of the counters, the cgroups it is known to be one of (None: any), and when its
    line was read (it was printed before, so its counter bump too)."""

    incident: Incident
    t_s: float | None
    cgroups: tuple[str, ...] | None = None
    arrived_s: float | None = None
    # a group kill's last kill line (None: `t_s`): its later members were counted after `t_s`
    last_t_s: float | None = None


@dataclass(frozen=True, slots=True)
class Options:
    """Where the evidence allows a waiting kill to be: cgroup -> rise indices, and how;
    `assigned` is its rise in one assignment of every kill that the evidence allows."""

    rises: dict[str, list[int]]
    method: AttributionMethod
    assigned: int | None = None
    # Every assignment the evidence allows gives this kill a rise.  Where there are more
    # kills than fitting rises (a stale line read from the ring's backlog, a kill in an
    # unwatched cgroup) a kill may have none, and then one fitting cgroup proves nothing.
    essential: bool = False

    @property
    def cgroups(self) -> list[str]:
        return sorted(self.rises)


def covers(counter_cgroup: str, kill_cgroup: str) -> bool:
    """A counter of `counter_cgroup` counts kills in it and (v2) below it."""
    return kill_cgroup == counter_cgroup or kill_cgroup.startswith(counter_cgroup.rstrip("/") + "/")


def related(a: str, b: str) -> bool:
    return covers(a, b) or covers(b, a)


def options(
    kills: Sequence[WaitingKill],
    rises: Sequence[Rise],
    witnesses: Witnesses,
    *,
    slack_s: float = LATE_SLACK_S,
) -> list[Options]:
    """For each waiting kill, the cgroups (and their rises) it may belong to."""
    edges: list[list[int]] = []
    methods: list[AttributionMethod] = []
    for kill in kills:
        fitting = [j for j, rise in enumerate(rises) if fits(kill, rise, witnesses, slack_s)]
        by_pid = _seen_in(kill, [rises[j] for j in fitting], witnesses)
        if by_pid is not None:
            fitting = [j for j in fitting if related(rises[j].cgroup, by_pid)]
            methods.append("pid_seen")
        elif _notified(kill, fitting, rises, witnesses):
            methods.append("oom_signal")
        else:
            methods.append("counter")
        edges.append(fitting)
    owner = maximum_matching(edges)
    assigned = {kill: rise for rise, kill in owner.items()}
    small = len(kills) <= MAX_MATCHING_KILLS  # else each kill's own evidence alone
    out: list[Options] = []
    for i, (kill_edges, method) in enumerate(zip(edges, methods, strict=True)):
        by_cgroup: dict[str, list[int]] = {}
        for j in kill_edges:
            by_cgroup.setdefault(rises[j].cgroup, []).append(j)
        if small:
            by_cgroup = {
                cgroup: js
                for cgroup, js in by_cgroup.items()
                if assigned.get(i) in js or any(_can_take(i, j, edges, owner, assigned) for j in js)
            }
        essential = small and len(by_cgroup) == 1 and _essential(i, edges, len(owner))
        out.append(Options(by_cgroup, method, assigned.get(i), essential))
    return out


def fits(kill: WaitingKill, rise: Rise, witnesses: Witnesses, slack_s: float) -> bool:
    """Whether every witness allows this counter rise to be this kill (`slack_s`: how late
    a converted kill time may be)."""
    if kill.cgroups is not None and not any(covers(rise.cgroup, c) for c in kill.cgroups):
        return False
    if kill.arrived_s is not None and rise.after_s is not None and kill.arrived_s < rise.after_s:
        # its line was read before the counter was last seen unchanged, so it was printed
        # (and its counter bumped) before then: not its rise.  Both times are the agent's
        # own clock, no conversion: the test holds whatever the kernel clock's offset.
        return False
    t = kill.t_s
    if t is not None:
        if rise.by_s + slack_s < t:
            return False  # counted before the kill happened: an earlier kill's
        last = t if kill.last_t_s is None else max(t, kill.last_t_s)
        if rise.after_s is not None and last < rise.after_s - TIME_SLACK_S:
            return False  # the counter had not moved yet when this kill was printed
    victim = kill.incident.victim
    limit = witnesses.limits_bytes.get(rise.cgroup)
    if victim is not None and victim.anon_rss_bytes is not None and limit is not None:
        return victim.anon_rss_bytes <= limit * LIMIT_MARGIN + LIMIT_SLACK_BYTES
    return True


def _notified(
    kill: WaitingKill, fitting: list[int], rises: Sequence[Rise], witnesses: Witnesses
) -> bool:
    """Whether a fitting cgroup's OOM notification came within the close watch before the
    kill: its rise was then dated by reads 2 ms apart (the method says so)."""
    t = kill.t_s
    return t is not None and any(
        t - HOT_WINDOW_S <= s.by_s <= t + TIME_SLACK_S
        for j in fitting
        for s in witnesses.signals.get(rises[j].cgroup, ())
    )


def _seen_in(kill: WaitingKill, fitting: Sequence[Rise], witnesses: Witnesses) -> str | None:
    """The cgroup the victim's pid was last seen in, when that narrows the fitting rises to
    at least one (a pid seen elsewhere than every fitting rise is a reused pid or a moved
    process: it says nothing)."""
    victim = kill.incident.victim
    seen = witnesses.sightings.get(victim.pid) if victim is not None else None
    if seen is None or (kill.t_s is not None and kill.t_s - seen.at_s > SIGHTING_MAX_AGE_S):
        return None
    if kill.t_s is not None and seen.at_s > kill.t_s + TIME_SLACK_S:
        return None  # seen there after its death: the pid was reused
    if not any(related(rise.cgroup, seen.cgroup) for rise in fitting):
        return None
    return seen.cgroup


def maximum_matching(edges: list[list[int]]) -> dict[int, int]:
    """Kills (indices of `edges`) to rises: as many kills as possible each get their own
    fitting rise, the earlier kills first (Kuhn's augmenting paths).  Returns rise -> kill."""
    owner: dict[int, int] = {}
    for i in range(len(edges)):
        _augment(i, edges, owner, set())
    return owner


def _essential(i: int, edges: list[list[int]], size: int) -> bool:
    """Whether every maximum matching covers kill i: without it, one fewer kill is matched."""
    without = [[] if k == i else e for k, e in enumerate(edges)]
    return len(maximum_matching(without)) < size


def _augment(i: int, edges: list[list[int]], owner: dict[int, int], seen: set[int]) -> bool:
    for j in edges[i]:
        if j in seen:
            continue
        seen.add(j)
        if j not in owner or _augment(owner[j], edges, owner, seen):
            owner[j] = i
            return True
    return False


def _can_take(
    i: int, j: int, edges: list[list[int]], owner: dict[int, int], matched: dict[int, int]
) -> bool:
    """Whether kill i can have rise j in some maximum matching (`owner` is one)."""
    if owner.get(j) == i:
        return True
    if i not in matched:
        return True  # j's kill gives it up to i: as many kills matched as before
    trial = dict(owner)
    del trial[matched[i]]
    other = trial.get(j)
    trial[j] = i
    if other is None:
        return True
    # One kill fewer is matched now (j's former kill lost it, i's old rise is free): the
    # matching is still maximum if some unmatched kill, the former one or another that
    # i's old rise fits, finds a rise, never the one just given to i.
    unmatched = set(range(len(edges))) - set(trial.values())
    return any(_augment(k, edges, trial, {j}) for k in sorted(unmatched))
