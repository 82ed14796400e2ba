"""Placing header-less kills and settling claims: the decisions of the reconciliation.

A bare kill is placed once a counter pass since it arrived shows its rise, where
`attribution.options` leaves one cgroup; it waits `AMBIGUOUS_WAIT_S` and is passed on as
ambiguous where several remain; every placed, ambiguous or reported kill leaves a claim, which
settles on a rise only once no later line can need it (see `reconcile`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from oomwatch.incident import (
    Attribution,
    AttributionCandidate,
    AttributionConfidence,
    AttributionMethod,
    Incident,
)
from oomwatch.reconcile.attribution import LATE_SLACK_S, Options, WaitingKill, fits, options
from oomwatch.reconcile.state import (
    AMBIGUOUS_WAIT_S,
    SETTLE_S,
    BareKill,
    CgroupFacts,
    Claim,
    Work,
)


def place(
    work: Work,
    facts: CgroupFacts,
    now_s: float,
    kernel_offset_s: float | None,
    kernel_late_s: float = 0.0,
) -> None:
    """Decide the bare kills the evidence now decides (each becomes a claim), settle the
    claims whose rises no later kill can need, and note which rises are still wanted.

    Only kills with a counter pass since they arrived take part: their own rise is then
    among the rises (the kernel bumps the counter before it prints the line).  A kill whose
    rise may still be on its way would take another's and make a third look certain.
    `kernel_late_s` widens how late a converted kill time may be (`KernelClock.late_s`)."""
    slack_s = LATE_SLACK_S + kernel_late_s
    _pair_in_bulk(work, facts, kernel_offset_s, slack_s)
    arrivals = [c.arrived_s for c in work.claims] + [b.arrived_s for b in work.bare]
    uncounted = any(not work.counted(arrived) for arrived in arrivals)
    work.held = set(range(len(work.rises))) if uncounted else set()  # it may take any
    if work.rises and (work.claims or work.bare):
        found = _options(work, facts, kernel_offset_s, slack_s)
        still: list[BareKill] = []
        for bare in work.bare:
            opts = found.get(id(bare))
            if opts is None or not _decide(work, bare, opts, now_s):
                still.append(bare)
        if len(still) < len(work.bare):  # the new claims take part in the matching now
            work.bare = still
            found = _options(work, facts, kernel_offset_s, slack_s)
        _settle(work, found, now_s)
        for bare in work.bare:
            opts = found.get(id(bare))
            if opts is not None:
                work.hold(opts)
        work.drop_taken()
    for waiting_kill in [b for b in work.bare if b.due_at_s <= now_s]:
        work.bare.remove(waiting_kill)
        attribute(
            waiting_kill.incident,
            "none",
            "unknown",
            [],
            "no watched cgroup's oom_kill counter rose at the time of this kill",
        )
        work.out.ready.append(waiting_kill.incident)


def _options(
    work: Work, facts: CgroupFacts, kernel_offset_s: float | None, slack_s: float
) -> dict[int, Options]:
    """Options of every counted claim and waiting bare kill, from one joint matching;
    keyed by the `id()` of the claim or bare kill."""
    keys: list[int] = []
    kills: list[WaitingKill] = []
    for claim in work.claims:
        if work.counted(claim.arrived_s):
            keys.append(id(claim))
            kills.append(_waiting(claim, kernel_offset_s))
    for bare in work.bare:
        if work.counted(bare.arrived_s):
            keys.append(id(bare))
            t_s = mono(bare.incident, kernel_offset_s)
            kills.append(WaitingKill(bare.incident, t_s, arrived_s=bare.arrived_s))
    found = options(kills, work.rises, work.witnesses(facts), slack_s=slack_s)
    return dict(zip(keys, found, strict=True))


_CLAIMED = Incident()  # stands in for a claimed kill: its cgroups alone decide


def _waiting(claim: Claim, kernel_offset_s: float | None) -> WaitingKill:
    """A claim as a kill waiting for its rise; one without its kill line fits any rise of
    its cgroups counted after the report began (`Claim.kill_line_read`)."""
    t_s = mono_time(claim.kernel_time_s, kernel_offset_s)
    if not claim.kill_line_read:
        return WaitingKill(_CLAIMED, t_s, claim.cgroups, None, math.inf)
    last_s = mono_time(claim.last_kernel_time_s, kernel_offset_s)
    return WaitingKill(_CLAIMED, t_s, claim.cgroups, claim.arrived_s, last_s)


BULK_RESIDUE = 16  # identical claims (and the rises they fit) left to the joint matching


def _pair_in_bulk(
    work: Work, facts: CgroupFacts, kernel_offset_s: float | None, slack_s: float
) -> None:
    """Settle a group kill's claims against its cgroup's rises at once, but for a residue.

    A memory.oom.group kill of 20,000 members claims 20,001 rises, and its cgroup's counter
    rises as often: the joint matching of every claim with every rise is quadratic (and its
    augmenting paths recurse once per claim), so one such kill stalled every tick.  The
    claims are identical; past `BULK_RESIDUE` of them, each takes a rise it fits now, while
    `BULK_RESIDUE` more such rises than all the other waiting kills stay: whatever rise any
    other kill may take is still there for the matching to give it."""
    copies = Counter(c for c in work.claims if work.counted(c.arrived_s))
    bulk = {claim: n - BULK_RESIDUE for claim, n in copies.items() if n > BULK_RESIDUE}
    if not bulk:
        return
    witnesses = work.witnesses(facts)
    taken: set[int] = set()
    for claim, surplus in bulk.items():
        others = len(work.claims) + len(work.bare) - copies[claim]
        kill = _waiting(claim, kernel_offset_s)
        fitting = [
            j
            for j, rise in enumerate(work.rises)
            if j not in taken and fits(kill, rise, witnesses, slack_s)
        ]
        pairs = min(surplus, len(fitting) - BULK_RESIDUE - others)
        if pairs > 0:
            taken.update(fitting[:pairs])
            bulk[claim] = pairs
        else:
            bulk[claim] = 0
    kept: list[Claim] = []
    for claim in work.claims:
        if bulk.get(claim, 0) > 0:
            bulk[claim] -= 1
            continue
        kept.append(claim)
    work.claims = kept
    work.rises = [rise for j, rise in enumerate(work.rises) if j not in taken]


def _settle(work: Work, found: dict[int, Options], now_s: float) -> None:
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


def _decide(work: Work, waiting: BareKill, opts: Options, now_s: float) -> bool:
    """Pass on a bare kill whose place is decided, leaving its claim; False if not yet."""
    cgroups = opts.cgroups
    if not cgroups:
        return False
    if not work.lines_in():
        return False
    sure = len(cgroups) == 1 and opts.essential
    if not sure and now_s < waiting.arrived_s + AMBIGUOUS_WAIT_S:
        return False
    incident = waiting.incident
    if sure:
        attribute(incident, opts.method, "certain", cgroups, _why(opts.method))
        incident.task_memcg = cgroups[0]
        work.out.attributed += 1
    else:
        why = _why_ambiguous(cgroups) if len(cgroups) > 1 else _MAYBE
        attribute(incident, opts.method, "ambiguous", cgroups, why)
        work.out.ambiguous += 1
    work.out.ready.append(incident)
    expires = now_s + work.keep_s
    work.claims.append(
        Claim(
            tuple(cgroups),
            incident.kernel_time_s,
            expires,
            waiting.arrived_s,
            incident.last_kill_kernel_time_s,
        )
    )
    return True


def mono(incident: Incident, kernel_offset_s: float | None) -> float | None:
    return mono_time(incident.kernel_time_s, kernel_offset_s)


def mono_time(kernel_time_s: float | None, kernel_offset_s: float | None) -> float | None:
    if kernel_time_s is None or kernel_offset_s is None:
        return None
    return kernel_time_s - kernel_offset_s


def attribute(
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


_MAYBE = (
    "more kills fit the time of this one than counter rises: it is in this cgroup or in one"
    " oomwatch does not watch (or it is an old line of the log the counters did not count)"
)
