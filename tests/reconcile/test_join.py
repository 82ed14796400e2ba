"""Reconciliation of kernel-log kills with cgroup counters (pure, no kernel needed).

Times are CLOCK_MONOTONIC seconds; the kernel log's clock is taken to be the same here
(`KernelTime()`, offset 0).  A header-less kill is placed only where the evidence leaves one
cgroup; where it leaves several, it is ambiguous and names them -- never a guess.
"""

from __future__ import annotations

import pytest

from oomwatch.cgroups.oom_events import OomSignal, Sighting
from oomwatch.incident import Incident, TaskRow, Victim
from oomwatch.reconcile import (
    AMBIGUOUS_WAIT_S,
    GRACE_S,
    GROUP_REPEAT_S,
    SETTLE_S,
    CgroupFacts,
    CgroupNews,
    CounterKills,
    KernelTime,
    Reconciled,
    ReconcileState,
    reconcile,
)

POD = "/kubepods/burstable/pod1234"
CTR_A = f"{POD}/aaaa"
CTR_B = f"{POD}/bbbb"
MIB = 1 << 20


def full(cgroup: str, t: float, pid: int, *, tasks: tuple[int, ...] = ()) -> Incident:
    return Incident(
        kind="memcg",
        kernel_time_s=t,
        oom_memcg=cgroup,
        task_memcg=cgroup,
        victims=[Victim(pid=pid, comm="hog")],
        tasks=[TaskRow(pid=p, name="hog") for p in tasks],
    )


def bare(t: float, pid: int, *, anon_bytes: int | None = None) -> Incident:
    victim = Victim(pid=pid, comm="python3", anon_rss_bytes=anon_bytes)
    return Incident(kind="memcg", kernel_time_s=t, header_suppressed=True, victims=[victim])


def counted(
    cgroup: str, n: int, at: float, group: int = 0, since: float | None = None
) -> CounterKills:
    return CounterKills(cgroup, n, at, group, since)


def news(*kills: CounterKills, at: float | None = None, **more: object) -> CgroupNews:
    """Counter rises from a pass that began at `at` (a pass after a kill line arrived)."""
    return CgroupNews(kills=kills, counted_at_s=at, **more)  # type: ignore[arg-type]


def settles(r: Reconciled) -> bool:
    """Once no later line can need them, the claims settle on the rises: nothing left over,
    nothing counter-only."""
    later_s = max([rise.by_s for rise in r.state.rises], default=0.0) + SETTLE_S
    later = reconcile(r.state, [], [], now_s=later_s)
    return later.ready == [] and later.state.quiet


def placed(r: Reconciled) -> dict[int, str | None]:
    return {i.victim.pid: i.task_memcg for i in r.ready if i.victim}


def test_full_report_passes_at_once_and_is_matched_by_its_counter() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 10.0, 100)], [], now_s=10.01)
    assert [i.victim.pid for i in r.ready if i.victim] == [100]
    attribution = r.ready[0].attribution
    assert attribution is not None and attribution.method == "report"
    assert attribution.confidence == "certain" and len(r.state.claims) == 1
    r = reconcile(r.state, [], news(counted(CTR_A, 1, 10.8, since=9.0), at=10.8), now_s=10.8)
    assert r.ready == [] and not r.state.quiet  # settles once no later line can need it
    r = reconcile(r.state, [], [], now_s=10.8 + SETTLE_S)
    assert r.ready == [] and settles(r)
    r = reconcile(r.state, [], [], now_s=100.0)  # long after: nothing synthesized
    assert r.ready == [] and r.missing == 0


def test_counter_before_log_record_is_settled_by_the_late_record() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_A, 1, 10.0)], now_s=10.0)
    assert r.ready == [] and len(r.state.rises) == 1
    r = reconcile(r.state, [full(CTR_A, 9.99, 100)], [], now_s=10.05)
    assert len(r.ready) == 1
    r = reconcile(r.state, [], news(at=10.06), now_s=10.06)  # the pass after the report
    assert r.ready == [] and settles(r)
    assert reconcile(r.state, [], [], now_s=50.0).missing == 0


def test_counted_kill_without_report_becomes_kmsg_missing_after_grace() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_B, 2, 10.0)], now_s=10.0)
    r = reconcile(r.state, [], [], now_s=11.0)
    assert r.ready == []
    r = reconcile(r.state, [], [], now_s=12.6)
    assert r.missing == 2 and len(r.ready) == 2 and settles(r)
    assert all(i.kmsg_missing and i.task_memcg == CTR_B for i in r.ready)


def test_bare_kill_waits_for_a_pass_after_it_then_takes_the_only_rise() -> None:
    first = full(CTR_A, 10.0, 100)
    second = bare(10.2, 101)
    r = reconcile(ReconcileState(), [first, second], [], now_s=10.21)
    assert r.ready == [first]  # the bare kill waits for a counter pass
    r = reconcile(r.state, [], news(counted(CTR_A, 2, 10.22, since=9.9), at=10.215), 10.22)
    assert r.ready == [second] and second.task_memcg == CTR_A and r.attributed == 1
    assert second.attribution is not None and second.attribution.confidence == "certain"
    assert second.attribution.method == "counter" and settles(r)


def test_a_pass_from_before_the_kill_line_arrived_decides_nothing() -> None:
    r = reconcile(ReconcileState(), [], news(counted(CTR_B, 1, 10.0, since=9.5), at=9.9), 10.0)
    late = bare(9.95, 7)
    r = reconcile(r.state, [late], [], now_s=10.1)
    assert r.ready == []  # another kill's rise could still be on its way
    r = reconcile(r.state, [], news(at=10.12), now_s=10.13)
    assert r.ready == [late] and late.task_memcg == CTR_B and settles(r)
    assert reconcile(r.state, [], [], now_s=60.0).missing == 0


def test_two_rises_that_both_fit_make_the_kill_ambiguous_and_name_both() -> None:
    kill = bare(10.0, 500)
    r = reconcile(ReconcileState(), [kill], [], now_s=10.01)
    both = news(counted(CTR_A, 1, 10.02, since=9.0), counted(CTR_B, 1, 10.02, since=9.0), at=10.01)
    r = reconcile(r.state, [], both, now_s=10.02)
    assert r.ready == []  # waits a moment for evidence still in flight
    r = reconcile(r.state, [], [], now_s=10.01 + AMBIGUOUS_WAIT_S)
    assert r.ready == [kill] and r.ambiguous == 1
    assert kill.task_memcg is None and kill.attribution is not None
    assert kill.attribution.confidence == "ambiguous"
    assert sorted(c.cgroup for c in kill.attribution.candidates) == [CTR_A, CTR_B]
    # the ambiguous kill used up one of the two rises; the other, unexplained, is a kill of
    # its own whose report never came: counted once, not twice
    r = reconcile(r.state, [], [], now_s=20.0)
    assert r.missing == 1 and settles(r)


def test_a_report_arriving_meanwhile_takes_its_rise_and_settles_the_bare_kill() -> None:
    kill = bare(10.0, 500)
    r = reconcile(ReconcileState(), [kill], [], now_s=10.001)
    both = news(counted(CTR_A, 1, 10.03, since=9.0), counted(CTR_B, 1, 10.03, since=9.0), at=10.002)
    r = reconcile(r.state, [], both, now_s=10.03)
    assert r.ready == []
    r = reconcile(r.state, [full(CTR_B, 10.02, 600)], [], now_s=10.04)
    assert r.ready == [r.ready[0]]  # the report passes on; its claim waits for a pass
    report = r.ready[0]
    r = reconcile(r.state, [], news(at=10.041), now_s=10.042)
    r.ready.insert(0, report)
    assert placed(r) == {600: CTR_B, 500: CTR_A}
    assert kill.attribution is not None and kill.attribution.confidence == "certain"


def test_counter_brackets_separate_kills_that_one_slow_read_would_mix() -> None:
    """Kills at 10.00 (A) and 10.20 (B); A's counter was seen to move by 10.05, B's only
    after 10.10: each kill has one fitting rise."""
    first, second = bare(10.0, 1), bare(10.2, 2)
    r = reconcile(ReconcileState(), [first, second], [], now_s=10.21)
    rises = news(
        counted(CTR_A, 1, 10.05, since=9.9), counted(CTR_B, 1, 10.25, since=10.1), at=10.22
    )
    r = reconcile(r.state, [], rises, now_s=10.25)
    assert placed(r) == {1: CTR_A, 2: CTR_B} and settles(r)


def test_matching_decides_a_kill_that_fits_two_rises_when_the_other_kill_fits_one() -> None:
    """Kill 1 fits both rises; kill 2 fits only A's: so kill 1 is B's."""
    one, two = bare(10.0, 1), bare(10.35, 2)
    r = reconcile(ReconcileState(), [one, two], [], now_s=10.36)
    rises = news(counted(CTR_A, 1, 10.4, since=9.0), counted(CTR_B, 1, 10.25, since=9.0), at=10.37)
    r = reconcile(r.state, [], rises, now_s=10.4)
    assert placed(r) == {1: CTR_B, 2: CTR_A}


def test_a_kill_dated_after_an_oom_notification_says_so() -> None:
    kill = bare(10.0, 1)
    signals = [OomSignal(CTR_A, 9.98, 9.99)]
    r = reconcile(ReconcileState(), [kill], news(signals=signals), now_s=10.004)
    r = reconcile(r.state, [], news(counted(CTR_A, 1, 10.003, since=9.995), at=10.005), 10.006)
    assert kill.task_memcg == CTR_A
    assert kill.attribution is not None and kill.attribution.method == "oom_signal"


def test_no_notification_since_a_cgroups_last_kill_rules_nothing_out() -> None:
    """A task that finds the memcg's OOM lock taken does not notify, yet may kill after the
    holder's kill: a second kill with no fresh notification is still that cgroup's."""
    first, second = bare(10.0, 1), bare(10.05, 2)
    r = reconcile(ReconcileState(), [first], news(signals=[OomSignal(CTR_A, 9.9, 9.95)]), 10.001)
    r = reconcile(r.state, [], news(counted(CTR_A, 1, 10.002, since=9.99), at=10.001), 10.003)
    assert first.task_memcg == CTR_A
    r = reconcile(r.state, [second], [], now_s=10.051)
    r = reconcile(r.state, [], news(counted(CTR_A, 1, 10.052, since=10.04), at=10.052), 10.053)
    assert second.task_memcg == CTR_A and settles(r)


def test_the_victims_pid_seen_in_a_cgroup_decides() -> None:
    kill = bare(10.0, 4242)
    seen = [Sighting(4242, CTR_B, 9.5), Sighting(77, CTR_A, 9.5)]
    r = reconcile(ReconcileState(), [kill], news(sightings=seen), now_s=10.01)
    both = news(counted(CTR_A, 1, 10.02, since=9.0), counted(CTR_B, 1, 10.02, since=9.0), at=10.01)
    r = reconcile(r.state, [], both, now_s=10.02)
    assert r.ready == [kill] and kill.task_memcg == CTR_B
    assert kill.attribution is not None and kill.attribution.method == "pid_seen"


def test_a_pid_seen_long_ago_may_be_reused_and_decides_nothing() -> None:
    kill = bare(1000.0, 4242)
    r = reconcile(
        ReconcileState(), [kill], news(sightings=[Sighting(4242, CTR_B, 100.0)]), now_s=1000.01
    )
    both = news(
        counted(CTR_A, 1, 1000.02, since=999.0), counted(CTR_B, 1, 1000.02, since=999.0), at=1000.01
    )
    r = reconcile(r.state, [], both, now_s=1001.0)
    assert kill.attribution is not None and kill.attribution.confidence == "ambiguous"


def test_a_victim_larger_than_a_cgroups_limit_cannot_be_its() -> None:
    facts = CgroupFacts(limits_bytes={CTR_A: 32 * MIB, CTR_B: 256 * MIB})
    kill = bare(10.0, 1, anon_bytes=200 << 20)
    r = reconcile(ReconcileState(), [kill], [], now_s=10.01, facts=facts)
    both = news(counted(CTR_A, 1, 10.02, since=9.0), counted(CTR_B, 1, 10.02, since=9.0), at=10.01)
    reconcile(r.state, [], both, now_s=10.02, facts=facts)
    assert kill.task_memcg == CTR_B


def test_task_tables_of_earlier_reports_are_sightings() -> None:
    a_report = full(CTR_A, 10.0, 100, tasks=(100, 200))
    b_report = full(CTR_B, 10.1, 300, tasks=(300, 400))
    bare_b, bare_a = bare(10.2, 400), bare(10.3, 200)
    r = reconcile(ReconcileState(), [a_report, b_report, bare_b, bare_a], [], now_s=10.4)
    rises = news(counted(CTR_A, 2, 11.0, since=9.0), counted(CTR_B, 2, 11.0, since=9.0), at=10.5)
    r = reconcile(r.state, [], rises, now_s=11.0)
    assert placed(r) == {200: CTR_A, 400: CTR_B} and settles(r)


def test_unplaced_bare_kill_is_passed_on_after_grace_with_its_cgroup_unknown() -> None:
    lost = bare(2.1, 999)
    r = reconcile(ReconcileState(), [lost], news(at=2.2), now_s=2.2)
    assert r.ready == []
    r = reconcile(r.state, [], [], now_s=5.0)
    assert r.ready == [lost] and lost.task_memcg is None
    assert lost.attribution is not None and lost.attribution.confidence == "unknown"


def test_pod_level_counter_explains_a_kill_below_it() -> None:
    """v2: a container that vanished before being read shows up at the pod's counter."""
    r = reconcile(ReconcileState(), [full(CTR_A, 10.0, 100)], [], 10.4)
    assert len(r.ready) == 1
    r = reconcile(r.state, [], news(counted(POD, 1, 10.5), at=10.45), 10.5)
    assert r.ready == [] and settles(r)


def test_counter_does_not_match_a_log_kill_of_another_cgroup() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 10.0, 100)], [], 10.4)
    r = reconcile(r.state, [], news(counted(CTR_B, 1, 10.5), at=10.45), 10.5)
    r = reconcile(r.state, [], [], now_s=13.5)
    assert r.missing == 1 and r.ready[0].task_memcg == CTR_B


def test_group_kill_counts_each_victim() -> None:
    """Without the decoder's count (an incident stored before it had one): one per victim."""
    group = full(CTR_A, 10.0, 100)
    group.victims.append(Victim(pid=101, comm="w"))
    group.group_kill = True
    r = reconcile(ReconcileState(), [group], [], 10.4)
    assert r.ready == [group]
    r = reconcile(r.state, [], news(counted(CTR_A, 2, 10.5, group=1), at=10.45), 10.5)
    assert r.ready == [] and settles(r)


@pytest.mark.parametrize("members", [1, 3])
def test_group_kill_explains_the_primary_victims_second_count(members: int) -> None:
    """The real kernel (6.1, 6.12, tests/v2) counts the primary victim of a memory.oom.group
    kill twice in oom_kill: memory.events showed oom_kill 4 for three processes.  That second
    count is no kill without a report (it made a spurious kmsg_missing incident per group
    kill -- on cgroup v2, where kubelet sets memory.oom.group, per container kill)."""
    group = full(CTR_A, 10.0, 100)
    group.victims += [Victim(pid=101 + i, comm="w") for i in range(members - 1)]
    group.group_kill = True
    group.kills_counted = members + 1
    r = reconcile(ReconcileState(), [group], [], 10.4)
    assert r.ready == [group]
    r = reconcile(r.state, [], news(counted(CTR_A, members + 1, 10.5, group=1), at=10.45), 10.5)
    assert r.ready == [] and settles(r)


def test_a_group_kills_counts_read_between_its_kill_lines_are_all_its_own() -> None:
    """A memory.oom.group kill prints one kill line per member, each after its count: 5-10 ms
    apart on an idle lab VM (tests/data/kernel-v2/*/group-kill.kmsg), more on a busy one.
    Where the agent read the counter between them, the later counts were "seen unchanged"
    after the primary's line and ruled out for it: one would be a second kill of the pod,
    with a second Event.  Each count may be up to the last kill line's."""
    group = full(CTR_A, 10.000, 100)
    group.victims.append(Victim(pid=101, comm="w"))
    group.group_kill = True
    group.group_cgroup = CTR_A
    group.kills_counted = 3
    group.last_kill_kernel_time_s = 10.090
    r = reconcile(ReconcileState(), [], news(counted(CTR_A, 1, 10.050, 0, 9.9), at=10.04), 10.05)
    r = reconcile(r.state, [group], [], 10.1)
    assert r.ready == [group]
    r = reconcile(r.state, [], news(counted(CTR_A, 2, 10.2, group=1, since=10.040), at=10.15), 10.2)
    assert r.ready == [] and settles(r)


@pytest.mark.parametrize("with_bare", [False, True])
def test_a_20000_member_group_kill_with_the_kernels_counts_settles_at_once(
    with_bare: bool,
) -> None:
    """The kernel counts every member of a memory.oom.group kill (20,001 for 20,000 members):
    matched one by one, 20,001 claims against 20,001 rises took 1.1 s a tick at 300 members
    and raised RecursionError at 1,000.  The identical claims settle in bulk, and a bare kill
    beside them keeps its own rise: one more rise than the group's claims is its."""
    members = 20_000
    group = full(CTR_A, 10.0, 100)
    group.victims += [Victim(pid=101 + i, comm="w") for i in range(287)]  # the capped list
    group.group_kill, group.group_cgroup, group.kills_counted = True, CTR_A, members + 1
    kills = [group, bare(10.1, 99_999)] if with_bare else [group]
    r = reconcile(ReconcileState(), kills, [], 10.2)
    assert r.ready == [group]
    rises = counted(CTR_A, members + 1 + with_bare, 10.5, group=1, since=9.9)
    r = reconcile(r.state, [], news(rises, at=10.45), 10.5)
    assert len(r.state.claims) + len(r.state.rises) < 100  # the bulk settled at once
    assert placed(r) == ({99_999: CTR_A} if with_bare else {})
    assert r.missing == 0 and settles(r)


@pytest.mark.parametrize(("after_s", "repeat"), [(0.15, True), (GROUP_REPEAT_S + 1.0, False)])
def test_a_group_victims_later_kill_line_is_a_repeat_only_soon_after(
    after_s: float, repeat: bool
) -> None:
    """The primary victim's second kill line, after its report was closed, is counted with
    the group kill; the same pid killed much later is another process (pids are reused)."""
    group = full(CTR_A, 10.0, 100)
    group.victims.append(Victim(pid=101, comm="w"))
    group.group_kill, group.group_cgroup, group.kills_counted = True, CTR_A, 2
    state = reconcile(ReconcileState(), [group], [], 10.01).state
    r = reconcile(state, [bare(10.0 + after_s, 100)], [], 10.02 + after_s)
    assert (r.repeats, r.state.bare == ()) == ((1, True) if repeat else (0, False))


def test_storm_read_promptly_places_every_bare_kill() -> None:
    """20 kills 200 ms apart across 4 cgroups, the last 10 header-less; the agent reads
    the counters a few ms after each kill line: every kill in its own cgroup."""
    cgroups = [f"{POD}/c{i}" for i in range(4)]
    state, ready, last_read = ReconcileState(), [], 9.0
    truth: dict[int, str] = {}
    for k in range(20):
        cg, pid, t = cgroups[k % 4], 1000 + k, 10 + k * 0.2
        truth[pid] = cg
        line = full(cg, t, pid, tasks=(pid,)) if k < 10 else bare(t, pid)
        r = reconcile(state, [line], [], now_s=t + 0.002)
        ready += r.ready
        r = reconcile(
            r.state,
            [],
            news(counted(cg, 1, t + 0.005, since=last_read), at=t + 0.003),
            now_s=t + 0.006,
        )
        ready += r.ready
        state, last_read = r.state, t + 0.005
    r = reconcile(state, [], [], now_s=40.0)
    ready += r.ready
    assert r.missing == 0 and settles(r)
    assert {i.victim.pid: i.task_memcg for i in ready if i.victim} == truth


def test_after_a_restart_kills_the_counters_cannot_separate_are_ambiguous_not_guessed() -> None:
    """Counters read once after a restart (when they moved: unknown): A 2 kills, B 2 kills,
    four identical header-less lines.  Nothing separates them: all four ambiguous, every
    rise used once, nothing counted twice."""
    bares = [bare(4.0 + i, 100 + i) for i in range(4)]
    r = reconcile(ReconcileState(), bares, [], now_s=9.0)
    r = reconcile(r.state, [], news(counted(CTR_A, 2, 9.1), counted(CTR_B, 2, 9.1), at=9.05), 9.1)
    r = reconcile(r.state, [], [], now_s=9.1 + AMBIGUOUS_WAIT_S)
    assert len(r.ready) == 4 and r.ambiguous == 4
    assert all(b.task_memcg is None for b in bares)
    assert all(
        b.attribution and sorted(c.cgroup for c in b.attribution.candidates) == [CTR_A, CTR_B]
        for b in bares
    )
    assert reconcile(r.state, [], [], now_s=60.0).missing == 0


def test_after_a_restart_one_moved_counter_places_every_kill() -> None:
    bares = [bare(4.0 + i, 100 + i) for i in range(3)]
    r = reconcile(ReconcileState(), bares, [], now_s=9.0)
    r = reconcile(r.state, [], news(counted(CTR_A, 3, 9.1), at=9.05), 9.1)
    assert all(b.task_memcg == CTR_A for b in bares) and settles(r)


def test_non_kernel_incidents_pass_through_untouched() -> None:
    framework = Incident(kind="framework")
    r = reconcile(ReconcileState(), [framework], [], now_s=1.0)
    assert r.ready == [framework] and settles(r) and framework.attribution is None


def test_old_backlog_kills_without_counters_expire_quietly() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 1.0, 5)], [], now_s=5000.0)
    r = reconcile(r.state, [], [], now_s=5031.0)
    assert r.ready == [] and settles(r)


def test_counter_only_kill_is_dated_when_its_counter_showed_it() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_B, 1, 10.0)], now_s=10.2)
    r = reconcile(r.state, [], [], now_s=13.0, wall_offset_s=1_800_000_000.0)
    [missing] = r.ready
    assert missing.kmsg_missing and missing.wall_time == "2027-01-15T08:00:10.000000+00:00"


def test_the_kernel_clock_offset_maps_kill_times_onto_the_counters_clock() -> None:
    """The kernel log runs 100 s ahead of CLOCK_MONOTONIC here: a kill stamped 110.0 is
    the rise seen at 10.05, not the one seen at 9.90."""
    kill = bare(110.0, 1)
    r = reconcile(ReconcileState(), [kill], [], now_s=10.01, kernel_time=KernelTime(100.0))
    rises = news(counted(CTR_A, 1, 9.90, since=9.8), counted(CTR_B, 1, 10.05, since=9.98), at=10.02)
    r = reconcile(r.state, [], rises, now_s=10.05, kernel_time=KernelTime(100.0))
    assert kill.task_memcg == CTR_B


def test_a_starved_reader_widens_how_late_a_kill_time_may_be() -> None:
    """Lab VM, 6.12, a busy host: the offset came from reads 100+ ms late, so a kill's
    converted time fell after its own counter rise plus the 50 ms allowed.  Ruling that
    rise out put the kill in the next kill's container, "certain".  With the reader's
    lateness known (`KernelClock.late_s`), the rise stays possible, and the matching
    gives each kill its own."""

    def run(late_s: float) -> dict[int, str | None]:
        first, second = bare(110.0, 1), bare(110.06, 2)
        # the true offset is 100.0; the estimate 99.9 (its promptest read was 100 ms late)
        rises = news(
            counted(CTR_A, 1, 9.98, since=9.97), counted(CTR_B, 1, 10.08, since=10.05), at=10.3
        )
        r = reconcile(
            ReconcileState(), [first, second], [], now_s=10.29, kernel_time=KernelTime(99.9)
        )
        r = reconcile(r.state, [], rises, now_s=10.31, kernel_time=KernelTime(99.9, late_s))
        reconcile(r.state, [], [], now_s=15.0, kernel_time=KernelTime(99.9, late_s))
        return {1: first.task_memcg, 2: second.task_memcg}

    assert run(0.0)[1] == CTR_B  # what the agent did: the second kill's container
    assert run(0.12) == {1: CTR_A, 2: CTR_B}


def test_a_kill_read_from_the_backlog_never_takes_a_later_kills_rise() -> None:
    """Seen on 6.12: an agent starting with no cursor reads old header-less
    kills from the ring, and while they wait a new kill's counter rises.  The old lines were
    read before that counter was last seen unchanged: the rise is not theirs, whatever
    their kernel time says (the clock offset is not known yet)."""
    old = [bare(64.0 + i, 100 + i) for i in range(3)]
    r = reconcile(ReconcileState(), old, news(at=200.0), now_s=200.0, kernel_time=KernelTime(None))
    new = bare(215.0, 555)
    r = reconcile(r.state, [new], [], now_s=215.01, kernel_time=KernelTime(None))
    rise = news(counted(CTR_A, 1, 215.02, since=214.5), at=215.015)
    r = reconcile(r.state, [], rise, now_s=215.02, kernel_time=KernelTime(None))
    assert new.task_memcg == CTR_A
    assert new.attribution is not None and new.attribution.confidence == "certain"
    r = reconcile(r.state, [], [], now_s=203.0 + 60, kernel_time=KernelTime(None))
    assert all(
        k.task_memcg is None and k.attribution is not None and k.attribution.confidence == "unknown"
        for k in old
    )


def test_two_kills_for_one_rise_are_not_both_certain() -> None:
    """Two kill lines fit, one counter rose: one of them is not in this cgroup (or not a
    counted kill at all), and the evidence cannot tell which."""
    one, two = bare(10.0, 1), bare(10.01, 2)
    r = reconcile(ReconcileState(), [one, two], [], now_s=10.02)
    r = reconcile(r.state, [], news(counted(CTR_A, 1, 10.03, since=9.0), at=10.025), 10.03)
    assert r.ready == []
    r = reconcile(r.state, [], [], now_s=10.02 + AMBIGUOUS_WAIT_S)
    for kill in (one, two):
        assert kill.task_memcg is None and kill.attribution is not None
        assert kill.attribution.confidence == "ambiguous"
        assert [c.cgroup for c in kill.attribution.candidates] == [CTR_A]


def test_a_kill_line_read_late_behind_a_backlog_is_matched_not_doubled() -> None:
    """The kernel's order under load: the counter moves (9.995) and the kill line is printed
    just after, but the log is read through only 9.5 while the agent decodes a backlog
    ahead of it (a 20,000-member group kill); the counter is read promptly.  The line comes
    4 s later: its rise waited for it -- one kill, not a report and a counter-only one."""
    r = reconcile(
        ReconcileState(),
        [],
        news(counted(CTR_A, 1, 10.0, since=9.99)),
        10.0,
        kernel_time=KernelTime(read_through_s=9.5),
    )
    for step in range(1, 40):  # the loop turns while the backlog decodes
        r = reconcile(
            r.state, [], [], now_s=10.0 + step * 0.1, kernel_time=KernelTime(read_through_s=9.5)
        )
        assert r.ready == [] and r.missing == 0
    late = full(CTR_A, 9.996, 100)
    r = reconcile(r.state, [late], [], now_s=14.0, kernel_time=KernelTime(read_through_s=14.0))
    assert r.ready == [late] and late.task_memcg == CTR_A
    r = reconcile(
        r.state, [], news(at=14.05), now_s=14.05, kernel_time=KernelTime(read_through_s=14.05)
    )
    assert r.ready == [] and r.state.quiet  # the pass after its line: the claim took the rise
    assert (
        reconcile(r.state, [], [], now_s=60.0, kernel_time=KernelTime(read_through_s=60.0)).missing
        == 0
    )


def test_a_counted_kill_whose_line_never_comes_is_counter_only_once_the_log_is_read() -> None:
    """Held while the log lags, a rise is still a counter-only kill once the log has been
    read past it and `GRACE_S` more has passed without its line."""
    r = reconcile(
        ReconcileState(),
        [],
        news(counted(CTR_B, 1, 10.0, since=9.99)),
        10.0,
        kernel_time=KernelTime(read_through_s=9.5),
    )
    r = reconcile(r.state, [], [], now_s=20.0, kernel_time=KernelTime(read_through_s=9.5))
    assert r.ready == []
    r = reconcile(
        r.state, [], [], now_s=20.1, kernel_time=KernelTime(read_through_s=20.1)
    )  # caught up
    assert r.ready == []
    r = reconcile(
        r.state, [], [], now_s=20.1 + GRACE_S + 0.1, kernel_time=KernelTime(read_through_s=22.7)
    )
    assert r.missing == 1 and r.ready[0].kmsg_missing and r.ready[0].task_memcg == CTR_B


def test_a_held_rise_is_never_taken_by_a_kill_of_another_cgroup() -> None:
    """While a rise of A waits for its line, B's report arrives: B's kill does not take A's
    rise, and A's late line still does."""
    r = reconcile(
        ReconcileState(),
        [],
        news(counted(CTR_A, 1, 10.0, since=9.99)),
        10.0,
        kernel_time=KernelTime(read_through_s=9.5),
    )
    r = reconcile(
        r.state,
        [full(CTR_B, 9.997, 200)],
        [],
        now_s=13.0,
        kernel_time=KernelTime(read_through_s=9.5),
    )
    assert r.ready[0].task_memcg == CTR_B and r.missing == 0
    late = full(CTR_A, 9.996, 100)
    r = reconcile(r.state, [late], [], now_s=14.0, kernel_time=KernelTime(read_through_s=14.0))
    assert late.task_memcg == CTR_A and r.missing == 0
    assert (
        reconcile(r.state, [], [], now_s=60.0, kernel_time=KernelTime(read_through_s=60.0)).missing
        == 0
    )


def test_a_report_closed_before_its_kill_line_takes_a_rise_counted_seconds_later() -> None:
    """The kernel counts a kill just before printing its kill line, after the task table: a
    30,000-row table on a starved relay took 14 s, the report closed at a pause without its
    kill line, and the counter read unchanged after the summary's stamp ruled the report
    out: its rise became a counter-only kill (the hostile soak, cycle 3)."""
    cut = full(CTR_A, 10.0, 100)  # the victim from the summary line; no kill line
    r = reconcile(ReconcileState(), [cut], [], 10.1)
    assert r.ready == [cut]
    r = reconcile(r.state, [], news(counted(CTR_A, 1, 24.1, since=24.0), at=24.05), 24.1)
    assert r.ready == [] and settles(r)


def test_the_late_kill_line_of_a_report_closed_without_it_is_that_kill() -> None:
    """... and when that kill line comes, bare, it is the same kill, not a second one."""
    cut = full(CTR_A, 10.0, 100)
    r = reconcile(ReconcileState(), [cut], [], 10.1)
    r = reconcile(r.state, [], news(counted(CTR_A, 1, 24.1, since=24.0), at=24.05), 24.1)
    r = reconcile(r.state, [bare(24.05, 100)], [], 25.5)
    assert (r.ready, r.late_lines, r.state.bare) == ([], 1, ())
    assert settles(r)
