"""The reconciliation's state, what it is fed, and its time limits (see `reconcile`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from oomwatch.cgroups.oom_events import OomSignal, Sighting
from oomwatch.incident import Incident
from oomwatch.reconcile.attribution import Options, Rise, Witnesses

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
# The kernel prints a group kill in one call path: its lines come within milliseconds
# (tests/data/kernel-v2/*/group-kill.kmsg), seconds at worst on a starved node.
GROUP_REPEAT_S = 5.0
# A memory.oom.group kill counts each member in `oom_kill` just before printing its kill line
# (mm/oom_kill.c: oom_kill_process -> mem_cgroup_scan_tasks(oom_kill_memcg_member) ->
# __oom_kill_process: memcg_memory_event_mm(MEMCG_OOM_KILL), then pr_err), all in one call
# path, so the counters show the whole group at once.  A starved relay passes a large
# group's member lines in pieces (a report closes at a 0.1 s pause, the rest come as
# continuation pieces).  While pieces keep coming the group is still being printed as far
# as the agent can tell: its cgroup's rises wait for them until no piece came for this long
# (a pause this long is taken for the group's end), or the log was read past the last
# piece's arrival ...
GROUP_PIECE_GAP_S = 30.0
# ... and never longer than this after its first piece, so the state stays bounded.
GROUP_LINES_KEEP_S = 300.0
MAX_GROUPS_IN_FLIGHT = 64
MAX_CUT_REPORTS = 64
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
    # a group kill's last kill line: each member is counted just before its own line
    last_kernel_time_s: float | None = None
    victim_pids: tuple[int, ...] = ()  # a later kill line of one of them is a repeat
    # False: a report closed at a pause before its kill line.  The kernel counts the kill
    # just before printing that line, after the report's last one, by as long as printing
    # the task table took (a starved relay passed 30,000 rows in 14 s): neither when the
    # report was read nor its stamps bound when the counter moved.
    kill_line_read: bool = True


@dataclass(frozen=True, slots=True)
class GroupInFlight:
    """A memory.oom.group kill whose member lines may still be coming: the cgroup the
    kernel named for it, when its first piece arrived and when its latest did."""

    cgroup: str
    first_s: float
    last_s: float

    def waits(self, now_s: float, read_s: float | None) -> bool:
        """Whether its rises still wait for lines: a piece came within `GROUP_PIECE_GAP_S`,
        or the log is not read past the latest piece (a report that began before it, the
        next piece, is open), within `GROUP_LINES_KEEP_S` of the first."""
        if now_s >= self.first_s + GROUP_LINES_KEEP_S:
            return False
        unread = read_s is not None and read_s < self.last_s
        return unread or now_s < self.last_s + GROUP_PIECE_GAP_S


@dataclass(frozen=True, slots=True)
class CutReport:
    """A report closed before its kill line (`Claim.kill_line_read`): that line, when it
    comes bare, is this kill's, not another."""

    pid: int
    kernel_time_s: float
    expires_at_s: float


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
    groups: tuple[GroupInFlight, ...] = ()  # group kills whose lines may still come
    cut: tuple[CutReport, ...] = ()  # reports whose kill line has not come

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
    repeats: int = 0  # kill lines that repeat a group kill already passed on
    late_lines: int = 0  # kill lines of reports passed on without them


@dataclass(slots=True)
class Work:
    """The state being folded, as mutable lists."""

    claims: list[Claim]
    rises: list[Rise]
    bare: list[BareKill]
    sightings: dict[int, Sighting]
    signals: list[OomSignal]
    counted_at_s: float | None
    out: Reconciled
    keep_s: float = UNMATCHED_KEEP_S
    # the kernel log was read through this time: every kill a counter showed before it
    # has its line in (the kernel prints it right after the counter bump)
    log_read_at_s: float | None = None
    held: set[int] = field(default_factory=set)  # rises some claim or waiting kill may take
    taken: set[int] = field(default_factory=set)  # rises settled claims took
    groups: dict[str, GroupInFlight] = field(default_factory=dict)  # by cgroup
    cut: list[CutReport] = field(default_factory=list)

    def counted(self, arrived_s: float) -> bool:
        """Whether a counter pass began after a kill arrived (its rise is then seen)."""
        return self.counted_at_s is not None and self.counted_at_s >= arrived_s

    def lines_in(self) -> bool:
        """Whether every kill the rises show has had its line read: else a kill whose
        line is still on its way competes for them unseen."""
        latest = max((r.by_s for r in self.rises), default=None)
        read = self.log_read_at_s
        return latest is None or read is None or read >= latest

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
