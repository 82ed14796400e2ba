"""Reconciliation of kernel-log kills with cgroup counters (pure, no kernel needed)."""

from __future__ import annotations

import pytest

from oomwatch.daemon.reconcile import (
    ATTRIBUTED_BY_PID_NOTE,
    CounterKills,
    ReconcileState,
    reconcile,
)
from oomwatch.incident import Incident, TaskRow, Victim

POD = "/kubepods/burstable/pod1234"
CTR_A = f"{POD}/aaaa"
CTR_B = f"{POD}/bbbb"


def full(cgroup: str, t: float, pid: int, *, tasks: tuple[int, ...] = ()) -> Incident:
    return Incident(
        kind="memcg",
        kernel_time_s=t,
        oom_memcg=cgroup,
        task_memcg=cgroup,
        victims=[Victim(pid=pid, comm="hog")],
        tasks=[TaskRow(pid=p, name="hog") for p in tasks],
    )


def bare(t: float, pid: int) -> Incident:
    return Incident(
        kind="memcg", kernel_time_s=t, header_suppressed=True, victims=[Victim(pid=pid, comm="h")]
    )


def counted(cgroup: str, n: int, at: float, group: int = 0) -> CounterKills:
    return CounterKills(cgroup, n, at, group)


def test_full_report_passes_at_once_and_is_matched_by_its_counter() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 10.0, 100)], [], now_s=10.01)
    assert [i.victim.pid for i in r.ready if i.victim] == [100]
    assert len(r.state.unmatched) == 1
    r = reconcile(r.state, [], [counted(CTR_A, 1, 10.8)], now_s=10.8)
    assert r.ready == [] and r.state.quiet
    # long after: nothing synthesized, nothing emitted twice
    r = reconcile(r.state, [], [], now_s=100.0)
    assert r.ready == [] and r.missing == 0


def test_counter_before_log_record_is_settled_by_the_late_record() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_A, 1, 10.0)], now_s=10.0)
    assert r.ready == [] and len(r.state.owed) == 1
    r = reconcile(r.state, [full(CTR_A, 9.99, 100)], [], now_s=10.05)
    assert len(r.ready) == 1 and r.state.quiet
    assert reconcile(r.state, [], [], now_s=50.0).missing == 0


def test_counted_kill_without_report_becomes_kmsg_missing_after_grace() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_B, 2, 10.0)], now_s=10.0)
    r = reconcile(r.state, [], [], now_s=11.0)
    assert r.ready == []
    r = reconcile(r.state, [], [], now_s=12.6)
    assert r.missing == 2
    assert all(i.kmsg_missing and i.task_memcg == CTR_B for i in r.ready)
    assert len(r.ready) == 2 and r.state.quiet


def test_bare_kill_takes_the_cgroup_of_the_unexplained_counter() -> None:
    first = full(CTR_A, 10.0, 100)
    second = bare(10.2, 101)
    r = reconcile(ReconcileState(), [first, second], [], now_s=10.3)
    assert r.ready == [first]  # the bare kill waits for a counter
    r = reconcile(r.state, [], [counted(CTR_A, 2, 11.0)], now_s=11.0)
    assert r.ready == [second] and second.task_memcg == CTR_A
    assert second.header_suppressed and r.attributed == 1 and r.state.quiet


def test_bare_kills_across_cgroups_prefer_the_cgroup_whose_task_table_listed_the_pid() -> None:
    a_report = full(CTR_A, 10.0, 100, tasks=(100, 200))
    b_report = full(CTR_B, 10.1, 300, tasks=(300, 400))
    bare_b = bare(10.2, 400)
    bare_a = bare(10.3, 200)
    r = reconcile(ReconcileState(), [a_report, b_report, bare_b, bare_a], [], now_s=10.4)
    r = reconcile(r.state, [], [counted(CTR_A, 2, 11.0), counted(CTR_B, 2, 11.0)], now_s=11.0)
    assert {i.victim.pid: i.task_memcg for i in r.ready if i.victim} == {200: CTR_A, 400: CTR_B}
    assert r.state.quiet


def test_bare_kill_after_its_counter_settles_the_debt() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_B, 1, 10.0)], now_s=10.0)
    late = bare(9.9, 7)
    r = reconcile(r.state, [late], [], now_s=10.1)
    assert r.ready == [late] and late.task_memcg == CTR_B and r.state.quiet
    assert reconcile(r.state, [], [], now_s=60.0).missing == 0


def test_unplaced_bare_kill_is_emitted_after_grace_with_a_pid_hint_or_without() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 1.0, 1, tasks=(1, 2)), bare(2.0, 2)], [], 2.0)
    r = reconcile(r.state, [bare(2.1, 999)], [], now_s=2.2)
    r = reconcile(r.state, [], [], now_s=5.0)
    by_pid = {i.victim.pid: i for i in r.ready if i.victim}
    assert by_pid[2].task_memcg == CTR_A and ATTRIBUTED_BY_PID_NOTE in by_pid[2].notes
    assert by_pid[999].task_memcg is None and by_pid[999].header_suppressed


def test_pod_level_counter_explains_a_kill_below_it() -> None:
    """v2: a container that vanished before being read shows up at the pod's counter."""
    r = reconcile(ReconcileState(), [full(CTR_A, 10.0, 100)], [counted(POD, 1, 10.5)], 10.5)
    assert len(r.ready) == 1 and r.state.quiet


def test_counter_does_not_match_a_log_kill_of_another_cgroup() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 10.0, 100)], [counted(CTR_B, 1, 10.5)], 10.5)
    r = reconcile(r.state, [], [], now_s=13.5)
    assert r.missing == 1 and r.ready[0].task_memcg == CTR_B


def test_group_kill_counts_each_victim() -> None:
    """Without the decoder's count (an incident stored before it had one): one per victim."""
    group = full(CTR_A, 10.0, 100)
    group.victims.append(Victim(pid=101, comm="w"))
    group.group_kill = True
    r = reconcile(ReconcileState(), [group], [counted(CTR_A, 2, 10.5, group=1)], 10.5)
    assert r.ready == [group] and r.state.quiet


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
    r = reconcile(ReconcileState(), [group], [counted(CTR_A, members + 1, 10.5, group=1)], 10.5)
    assert r.ready == [group] and r.state.quiet
    assert reconcile(r.state, [], [], 60.0).missing == 0


def test_burst_of_twenty_with_suppressed_headers_records_each_kill_once() -> None:
    """10 full reports then 10 bare lines across 4 cgroups; counters read once a second."""
    cgroups = [f"{POD}/c{i}" for i in range(4)]
    logs: list[Incident] = []
    for k in range(20):
        cg = cgroups[k % 4]
        pid = 1000 + k
        t = 10 + k * 0.05
        logs.append(full(cg, t, pid, tasks=(pid,)) if k < 10 else bare(t, pid))
    state = ReconcileState()
    ready: list[Incident] = []
    r = reconcile(state, logs, [], now_s=11.0)
    ready += r.ready
    r = reconcile(r.state, [], [counted(cg, 5, 11.5) for cg in cgroups], now_s=11.5)
    ready += r.ready
    r = reconcile(r.state, [], [], now_s=30.0)
    ready += r.ready
    assert len(ready) == 20 and r.missing == 0 and r.state.quiet
    assert len({i.victim.pid for i in ready if i.victim}) == 20
    per_cgroup = {cg: sum(1 for i in ready if i.task_memcg == cg) for cg in cgroups}
    assert per_cgroup == {cg: 5 for cg in cgroups}


def test_non_kernel_incidents_pass_through_untouched() -> None:
    framework = Incident(kind="framework")
    r = reconcile(ReconcileState(), [framework], [], now_s=1.0)
    assert r.ready == [framework] and r.state.quiet


def test_old_backlog_kills_without_counters_expire_quietly() -> None:
    r = reconcile(ReconcileState(), [full(CTR_A, 1.0, 5)], [], now_s=5000.0)
    r = reconcile(r.state, [], [], now_s=5031.0)
    assert r.ready == [] and r.state.quiet


@pytest.mark.parametrize("counters_first", [True, False])
def test_after_a_restart_bare_kills_go_where_task_tables_listed_their_names(
    counters_first: bool,
) -> None:
    """All counters move at once after a restart; the names earlier reports listed decide."""
    names = {CTR_A: "api", CTR_B: "worker"}
    reports = [full(cg, 1.0 + i, 10 + i, tasks=(10 + i,)) for i, cg in enumerate(names)]
    for report, name in zip(reports, names.values(), strict=True):
        report.tasks[0].name = name
    r = reconcile(ReconcileState(), reports, [counted(CTR_A, 1, 3.0), counted(CTR_B, 1, 3.0)], 3.0)
    assert r.state.quiet
    # two header-less kills in each; the worker's come first in the log
    bares = [bare(4.0 + i, 100 + i) for i in range(4)]
    for b, name in zip(bares, ["worker", "worker", "api", "api"], strict=True):
        b.victims[0].comm = name
    counters = [counted(CTR_A, 2, 9.0), counted(CTR_B, 2, 9.0)]
    if counters_first:
        r = reconcile(r.state, [], counters, now_s=9.0)
        r = reconcile(r.state, bares, [], now_s=9.1)
    else:
        r = reconcile(r.state, bares, [], now_s=9.0)
        r = reconcile(r.state, [], counters, now_s=9.1)
    assert {b.victims[0].pid: b.task_memcg for b in bares} == {
        100: CTR_B, 101: CTR_B, 102: CTR_A, 103: CTR_A
    }
    assert r.state.quiet and r.attributed == 4


def test_counter_only_kill_is_dated_when_its_counter_showed_it() -> None:
    r = reconcile(ReconcileState(), [], [counted(CTR_B, 1, 10.0)], now_s=10.2)
    r = reconcile(r.state, [], [], now_s=13.0, wall_offset_s=1_800_000_000.0)
    [missing] = r.ready
    assert missing.kmsg_missing and missing.wall_time == "2027-01-15T08:00:10.000000+00:00"


def test_counters_moving_together_leave_each_bare_kill_to_the_likeliest_cgroup() -> None:
    """After a restart: B counted 5, A 1, and of the replayed bare kills one is named like
    A's tasks while the last of B's is not read yet.  Greedy, B's counter would take the
    one A explains; the likeliest pairs go first instead."""
    report = full(CTR_A, 1.0, 10, tasks=(10,))
    report.tasks[0].name = "api"
    r = reconcile(ReconcileState(), [report], [counted(CTR_A, 1, 1.5)], now_s=1.5)
    bares = [bare(2.0 + i / 10, 100 + i) for i in range(6)]
    bares[0].victims[0].comm = "api"
    r = reconcile(r.state, bares[:5], [], now_s=3.0)
    r = reconcile(r.state, [], [counted(CTR_B, 5, 3.1), counted(CTR_A, 1, 3.1)], now_s=3.1)
    r = reconcile(r.state, bares[5:], [], now_s=3.2)  # B's last line, read late
    assert bares[0].task_memcg == CTR_A
    assert all(b.task_memcg == CTR_B for b in bares[1:])
    assert r.state.quiet
