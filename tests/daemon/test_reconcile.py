"""Reconciliation of kernel-log kills with cgroup counters (pure, no kernel needed).

Times are CLOCK_MONOTONIC seconds; the kernel log's clock is taken to be the same here
(`kernel_offset_s=0`).  A header-less kill is placed only where the evidence leaves one
cgroup; where it leaves several, it is ambiguous and names them -- never a guess.
"""

from __future__ import annotations

from oomwatch.cgroups.oom_events import OomSignal, Sighting
from oomwatch.daemon.reconcile import (
    AMBIGUOUS_WAIT_S,
    CgroupFacts,
    CgroupNews,
    CounterKills,
    Reconciled,
    ReconcileState,
    reconcile,
)
from oomwatch.incident import Incident, TaskRow, Victim

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


def bare(t: float, pid: int, *, anon_kb: int | None = None) -> Incident:
    victim = Victim(pid=pid, comm="python3", anon_rss_kb=anon_kb)
    return Incident(kind="memcg", kernel_time_s=t, header_suppressed=True, victims=[victim])


def counted(
    cgroup: str, n: int, at: float, group: int = 0, since: float | None = None
) -> CounterKills:
    return CounterKills(cgroup, n, at, group, since)


def news(*kills: CounterKills, at: float | None = None, **more: object) -> CgroupNews:
    """Counter rises from a pass that began at `at` (a pass after a kill line arrived)."""
    return CgroupNews(kills=kills, counted_at_s=at, **more)  # type: ignore[arg-type]


def placed(r: Reconciled) -> dict[int, str | None]:
    return {i.victim.pid: i.task_memcg for i in r.ready if i.victim}


def test_full_report_passes_at_once_and_is_matched_by_its_counter() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 10.0, 100)], [], now_s=10.01)
    assert [i.victim.pid for i in r.ready if i.victim] == [100]
    attribution = r.ready[0].attribution
    assert attribution is not None and attribution.method == "report"
    assert attribution.confidence == "certain" and len(r.state.unmatched) == 1
    r = reconcile(r.state, [], [counted(CTR_A, 1, 10.8, since=9.0)], now_s=10.8)
    assert r.ready == [] and r.state.quiet
    r = reconcile(r.state, [], [], now_s=100.0)  # long after: nothing synthesized
    assert r.ready == [] and r.missing == 0


def test_counter_before_log_record_is_settled_by_the_late_record() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_A, 1, 10.0)], now_s=10.0)
    assert r.ready == [] and len(r.state.rises) == 1
    r = reconcile(r.state, [full(CTR_A, 9.99, 100)], [], now_s=10.05)
    assert len(r.ready) == 1 and r.state.quiet
    assert reconcile(r.state, [], [], now_s=50.0).missing == 0


def test_counted_kill_without_report_becomes_kmsg_missing_after_grace() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_B, 2, 10.0)], now_s=10.0)
    r = reconcile(r.state, [], [], now_s=11.0)
    assert r.ready == []
    r = reconcile(r.state, [], [], now_s=12.6)
    assert r.missing == 2 and len(r.ready) == 2 and r.state.quiet
    assert all(i.kmsg_missing and i.task_memcg == CTR_B for i in r.ready)


def test_bare_kill_waits_for_a_pass_after_it_then_takes_the_only_rise() -> None:
    first = full(CTR_A, 10.0, 100)
    second = bare(10.2, 101)
    r = reconcile(ReconcileState(), [first, second], [], now_s=10.21)
    assert r.ready == [first]  # the bare kill waits for a counter pass
    r = reconcile(r.state, [], news(counted(CTR_A, 2, 10.22, since=9.9), at=10.215), 10.22)
    assert r.ready == [second] and second.task_memcg == CTR_A and r.attributed == 1
    assert second.attribution is not None and second.attribution.confidence == "certain"
    assert second.attribution.method == "counter" and r.state.quiet


def test_a_pass_from_before_the_kill_line_arrived_decides_nothing() -> None:
    r = reconcile(ReconcileState(), [], news(counted(CTR_B, 1, 10.0, since=9.5), at=9.9), 10.0)
    late = bare(9.95, 7)
    r = reconcile(r.state, [late], [], now_s=10.1)
    assert r.ready == []  # another kill's rise could still be on its way
    r = reconcile(r.state, [], news(at=10.12), now_s=10.13)
    assert r.ready == [late] and late.task_memcg == CTR_B and r.state.quiet
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
    assert r.missing == 1 and r.state.quiet


def test_a_report_arriving_meanwhile_takes_its_rise_and_settles_the_bare_kill() -> None:
    kill = bare(10.0, 500)
    r = reconcile(ReconcileState(), [kill], [], now_s=10.001)
    both = news(counted(CTR_A, 1, 10.03, since=9.0), counted(CTR_B, 1, 10.03, since=9.0),
                at=10.002)
    r = reconcile(r.state, [], both, now_s=10.03)
    assert r.ready == []
    r = reconcile(r.state, [full(CTR_B, 10.02, 600)], [], now_s=10.04)
    assert placed(r) == {600: CTR_B, 500: CTR_A}
    assert kill.attribution is not None and kill.attribution.confidence == "certain"


def test_counter_brackets_separate_kills_that_one_slow_read_would_mix() -> None:
    """Kills at 10.00 (A) and 10.20 (B); A's counter was seen to move by 10.05, B's only
    after 10.10: each kill has one fitting rise."""
    first, second = bare(10.0, 1), bare(10.2, 2)
    r = reconcile(ReconcileState(), [first, second], [], now_s=10.21)
    rises = news(counted(CTR_A, 1, 10.05, since=9.9), counted(CTR_B, 1, 10.25, since=10.1),
                 at=10.22)
    r = reconcile(r.state, [], rises, now_s=10.25)
    assert placed(r) == {1: CTR_A, 2: CTR_B} and r.state.quiet


def test_matching_decides_a_kill_that_fits_two_rises_when_the_other_kill_fits_one() -> None:
    """Kill 1 fits both rises; kill 2 fits only A's: so kill 1 is B's."""
    one, two = bare(10.0, 1), bare(10.3, 2)
    r = reconcile(ReconcileState(), [one, two], [], now_s=10.31)
    rises = news(counted(CTR_A, 1, 10.4, since=9.0), counted(CTR_B, 1, 10.25, since=9.0),
                 at=10.32)
    r = reconcile(r.state, [], rises, now_s=10.4)
    assert placed(r) == {1: CTR_B, 2: CTR_A}


def test_oom_notifications_separate_kills_the_counters_cannot() -> None:
    """Both counters were read only after both kills, but A notified its OOM before the
    first kill and B only after it: the first kill is A's, the second B's."""
    one, two = bare(10.00, 1), bare(10.10, 2)
    facts = CgroupFacts(signals_watched_since={CTR_A: 0.0, CTR_B: 0.0})
    signals = [OomSignal(CTR_A, 9.98, 9.99), OomSignal(CTR_B, 10.05, 10.06)]
    r = reconcile(ReconcileState(), [one, two], news(signals=signals), now_s=10.11, facts=facts)
    rises = news(counted(CTR_A, 1, 10.2, since=9.0), counted(CTR_B, 1, 10.2, since=9.0),
                 at=10.15)
    r = reconcile(r.state, [], rises, now_s=10.2, facts=facts)
    assert placed(r) == {1: CTR_A, 2: CTR_B}
    assert one.attribution is not None and one.attribution.method == "oom_signal"


def test_a_cgroup_without_a_notification_since_its_last_kill_cannot_have_a_new_one() -> None:
    facts = CgroupFacts(signals_watched_since={CTR_A: 0.0, CTR_B: 0.0})
    earlier = full(CTR_A, 9.0, 90)
    signals = [OomSignal(CTR_A, 8.9, 8.95), OomSignal(CTR_B, 9.9, 9.95)]
    kill = bare(10.0, 1)
    r = reconcile(ReconcileState(), [earlier, kill],
                  news(counted(CTR_A, 1, 9.05, since=8.0), signals=signals), 10.01, facts=facts)
    rises = news(counted(CTR_A, 1, 10.1, since=9.5), counted(CTR_B, 1, 10.1, since=9.5),
                 at=10.05)
    r = reconcile(r.state, [], rises, now_s=10.1 + AMBIGUOUS_WAIT_S, facts=facts)
    assert kill.task_memcg == CTR_B  # A's only notification came before its earlier kill


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
    r = reconcile(ReconcileState(), [kill], news(sightings=[Sighting(4242, CTR_B, 100.0)]),
                  now_s=1000.01)
    both = news(counted(CTR_A, 1, 1000.02, since=999.0), counted(CTR_B, 1, 1000.02, since=999.0),
                at=1000.01)
    r = reconcile(r.state, [], both, now_s=1001.0)
    assert kill.attribution is not None and kill.attribution.confidence == "ambiguous"


def test_a_victim_larger_than_a_cgroups_limit_cannot_be_its() -> None:
    facts = CgroupFacts(limits_bytes={CTR_A: 32 * MIB, CTR_B: 256 * MIB})
    kill = bare(10.0, 1, anon_kb=200 * 1024)
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
    assert placed(r) == {200: CTR_A, 400: CTR_B} and r.state.quiet


def test_unplaced_bare_kill_is_passed_on_after_grace_with_its_cgroup_unknown() -> None:
    lost = bare(2.1, 999)
    r = reconcile(ReconcileState(), [lost], news(at=2.2), now_s=2.2)
    assert r.ready == []
    r = reconcile(r.state, [], [], now_s=5.0)
    assert r.ready == [lost] and lost.task_memcg is None
    assert lost.attribution is not None and lost.attribution.confidence == "unknown"


def test_pod_level_counter_explains_a_kill_below_it() -> None:
    """v2: a container that vanished before being read shows up at the pod's counter."""
    r = reconcile(ReconcileState(), [full(CTR_A, 10.0, 100)], [counted(POD, 1, 10.5)], 10.5)
    assert len(r.ready) == 1 and r.state.quiet


def test_counter_does_not_match_a_log_kill_of_another_cgroup() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 10.0, 100)], [counted(CTR_B, 1, 10.5)], 10.5)
    r = reconcile(r.state, [], [], now_s=13.5)
    assert r.missing == 1 and r.ready[0].task_memcg == CTR_B


def test_group_kill_counts_each_victim() -> None:
    group = full(CTR_A, 10.0, 100)
    group.victims.append(Victim(pid=101, comm="w"))
    group.group_kill = True
    r = reconcile(ReconcileState(), [group], [counted(CTR_A, 2, 10.5, group=1)], 10.5)
    assert r.ready == [group] and r.state.quiet


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
        r = reconcile(r.state, [], news(counted(cg, 1, t + 0.005, since=last_read), at=t + 0.003),
                      now_s=t + 0.006)
        ready += r.ready
        state, last_read = r.state, t + 0.005
    r = reconcile(state, [], [], now_s=40.0)
    ready += r.ready
    assert r.missing == 0 and r.state.quiet
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
    assert all(b.task_memcg == CTR_A for b in bares) and r.state.quiet


def test_non_kernel_incidents_pass_through_untouched() -> None:
    framework = Incident(kind="framework")
    r = reconcile(ReconcileState(), [framework], [], now_s=1.0)
    assert r.ready == [framework] and r.state.quiet and framework.attribution is None


def test_old_backlog_kills_without_counters_expire_quietly() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 1.0, 5)], [], now_s=5000.0)
    r = reconcile(r.state, [], [], now_s=5031.0)
    assert r.ready == [] and r.state.quiet


def test_counter_only_kill_is_dated_when_its_counter_showed_it() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_B, 1, 10.0)], now_s=10.2)
    r = reconcile(r.state, [], [], now_s=13.0, wall_offset_s=1_800_000_000.0)
    [missing] = r.ready
    assert missing.kmsg_missing and missing.wall_time == "2027-01-15T08:00:10.000000+00:00"


def test_the_kernel_clock_offset_maps_kill_times_onto_the_counters_clock() -> None:
    """The kernel log runs 100 s ahead of CLOCK_MONOTONIC here: a kill stamped 110.0 is
    the rise seen at 10.05, not the one seen at 9.95."""
    kill = bare(110.0, 1)
    r = reconcile(ReconcileState(), [kill], [], now_s=10.01, kernel_offset_s=100.0)
    rises = news(counted(CTR_A, 1, 9.95, since=9.8), counted(CTR_B, 1, 10.05, since=9.98),
                 at=10.02)
    r = reconcile(r.state, [], rises, now_s=10.05, kernel_offset_s=100.0)
    assert kill.task_memcg == CTR_B
