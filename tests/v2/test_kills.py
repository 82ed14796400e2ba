"""Real OOM kills on cgroup v2, decoded from what the kernel printed: the v2 twins of
tests/kernel (single kill, pod-level limit, child worker, burst) and the group kill v1 lacks.

Each scenario is recorded (`record`) as a fixture for the fast tests.
"""

from __future__ import annotations

import uuid

import pytest
from support.kernel_record import record, snapshot

from oomwatch.cgroup_identity import annotate
from oomwatch.lab import ScratchMemcg, kubelet_layout, provoke_kill, spawn_hog

MIB = 1 << 20
CONTAINER_ID = "c0ffee00" * 8

pytestmark = pytest.mark.kernel


def test_single_kill(scratch_v2: ScratchMemcg) -> None:
    memcg = scratch_v2.create_child("plain", 64 * MIB)
    before = snapshot(scratch_v2)
    capture = provoke_kill(memcg, mode="anon", mb=200, comm="v2-plain")
    incident = capture.full_incident()
    record(
        "single-kill",
        capture.records,
        scratch_v2,
        before,
        victim_pid=capture.hog.pid,
        memcg=memcg.relpath,
    )

    assert (incident.kind, incident.constraint) == ("memcg", "CONSTRAINT_MEMCG")
    assert incident.oom_memcg == incident.task_memcg == memcg.relpath
    victim = incident.victim
    assert victim is not None and (victim.pid, victim.comm) == (capture.hog.pid, "v2-plain")
    assert incident.memcg is not None and incident.memcg.limit_bytes == 64 * MIB
    assert incident.memcg.usage_bytes is not None and incident.memcg.usage_bytes >= 63 * MIB
    # v2 prints memory.stat names (anon, file, shmem, ...), not v1's rss/cache
    assert incident.memcg_stats is not None and "anon" in incident.memcg_stats
    assert "rss" not in incident.memcg_stats
    breakdown = incident.breakdown_bytes
    assert breakdown is not None and breakdown.anon is not None and breakdown.anon >= 56 * MIB
    assert [row.name for row in incident.tasks if row.pid == capture.hog.pid] == ["v2-plain"]
    # memory.events counts hierarchically, memory.events.local only here
    assert (memcg.events()["oom"], memcg.events()["oom_kill"]) == (1, 1)
    assert memcg.events(local=True)["oom_kill"] == 1
    assert scratch_v2.events()["oom_kill"] == 1 and scratch_v2.events(local=True)["oom_kill"] == 0
    assert memcg.oom_kill_count() == 1


@pytest.mark.parametrize(
    ("driver", "scope"), [("cgroupfs", "pod"), ("systemd", "pod"), ("systemd", "container")]
)
def test_kubelet_hierarchy(scratch_v2: ScratchMemcg, driver: str, scope: str) -> None:
    pod_uid = str(uuid.uuid4())
    container = kubelet_layout(
        scratch_v2,
        pod_uid,
        CONTAINER_ID,
        qos="burstable",
        driver=driver,  # type: ignore[arg-type]
        pod_limit_bytes=96 * MIB,
        container_limit_bytes=64 * MIB if scope == "container" else None,
    )
    pod_relpath = container.relpath.rsplit("/", 1)[0]
    before = snapshot(scratch_v2)
    capture = provoke_kill(container, mode="anon", mb=300, comm="app")
    incident = annotate(capture.full_incident())
    record(
        f"kubelet-{driver}-{scope}-limit",
        capture.records,
        scratch_v2,
        before,
        victim_pid=capture.hog.pid,
        pod_uid=pod_uid,
        container=container.relpath,
        pod=pod_relpath,
    )

    expected_oom_memcg = pod_relpath if scope == "pod" else container.relpath
    assert incident.oom_memcg == expected_oom_memcg
    assert incident.task_memcg == container.relpath
    assert incident.memcg is not None
    assert incident.memcg.limit_bytes == (96 if scope == "pod" else 64) * MIB
    assert (incident.pod_uid, incident.container_id) == (pod_uid, CONTAINER_ID)
    assert (incident.qos_class, incident.limit_scope) == ("burstable", scope)
    assert (incident.cgroup_driver, incident.runtime) == (driver, "containerd")
    # the OOM is counted where the limit was hit, the kill where the victim lived
    pod = next(m for m in scratch_v2.memcgs() if m.relpath == pod_relpath)
    local_oom = (pod if scope == "pod" else container).events(local=True)["oom"]
    assert local_oom == 1
    assert container.events(local=True)["oom_kill"] == 1
    assert pod.events()["oom_kill"] == 1


def test_child_worker_killed_while_its_parent_lives(scratch_v2: ScratchMemcg) -> None:
    memcg = scratch_v2.create_child("worker", 64 * MIB)
    capture = provoke_kill(
        memcg,
        mode="child-worker",
        mb=200,
        comm="dl-worker",
        parent_comm="trainer-main",
        linger_s=30,
    )
    incident = capture.full_incident()
    [child] = capture.victim_pids
    parent = capture.hog
    record(
        "child-worker",
        capture.records,
        scratch_v2,
        victim_pid=child,
        parent_pid=parent.pid,
        memcg=memcg.relpath,
    )
    victim = incident.victim
    assert victim is not None and (victim.pid, victim.comm) == (child, "dl-worker")
    assert {row.pid: row.name for row in incident.tasks} == {
        parent.pid: "trainer-main",
        child: "dl-worker",
    }
    assert parent.poll() is None and memcg.pids() == [parent.pid]
    assert memcg.events()["oom_kill"] == 1


def test_group_kill_is_one_incident_with_every_member(scratch_v2: ScratchMemcg) -> None:
    """memory.oom.group=1 (kubelet sets it on v2 since 1.28): the kernel kills every process
    of the container; the decoder must give one incident that names them all."""
    pod_uid = str(uuid.uuid4())
    container = kubelet_layout(
        scratch_v2, pod_uid, CONTAINER_ID, driver="systemd", container_limit_bytes=64 * MIB
    )
    container.set_oom_group()
    peers = [spawn_hog(container, "idle", mb=4, comm=f"peer-{i}") for i in range(2)]
    for peer in peers:
        assert peer.wait_for("holding") == "holding"
    before = snapshot(scratch_v2)
    capture = provoke_kill(container, mode="anon", mb=200, comm="grower")
    for peer in peers:
        assert peer.wait(10) == -9
    members = {capture.hog.pid, *(peer.pid for peer in peers)}
    kill_lines = [r for r in capture.records if b"Killed process " in r]
    record(
        "group-kill",
        capture.records,
        scratch_v2,
        before,
        victim_pid=capture.hog.pid,
        members=sorted(members),
        pod_uid=pod_uid,
        container=container.relpath,
    )

    incident = annotate(capture.full_incident())
    assert incident.group_kill and incident.group_cgroup == container.relpath
    assert {v.pid for v in incident.victims} == members
    assert len(incident.victims) == len(members)  # the primary's second line is no new victim
    assert incident.victim is not None and incident.victim.pid == capture.hog.pid
    assert incident.pod_uid == pod_uid and incident.limit_scope == "container"
    events = container.events()
    # Every `Killed process` line is one oom_kill: the primary is killed (and counted) first
    # as the victim, then again as a member of the group.
    assert (events["oom"], events["oom_group_kill"]) == (1, 1)
    assert events["oom_kill"] == len(kill_lines)
    assert len(kill_lines) == len(members) + 1


def test_burst_of_kills_decodes_every_kill_once(scratch_v2: ScratchMemcg) -> None:
    kills = 16
    memcg = scratch_v2.create_child("burst", 32 * MIB)
    capture = provoke_kill(
        memcg, mode="child-worker", children=kills, mb=96, comm="burst-child", linger_s=0
    )
    record(
        "burst", capture.records, scratch_v2, victim_pids=capture.victim_pids, memcg=memcg.relpath
    )
    assert len(capture.victim_pids) == kills
    assert memcg.events()["oom_kill"] == kills

    incidents = capture.incidents()
    by_victim = {incident.victims[0].pid: incident for incident in incidents}
    assert len(incidents) == kills and sorted(by_victim) == sorted(capture.victim_pids)
    suppressed = [pid for pid, incident in by_victim.items() if incident.header_suppressed]
    for pid, incident in by_victim.items():
        assert incident.header_suppressed == (not capture.has_full_report(pid))
        if not incident.header_suppressed:
            assert incident.task_memcg == memcg.relpath
    times = [i.kernel_time_s for i in incidents if i.kernel_time_s is not None]
    if max(times) - min(times) < 5:  # emulation is slow: only a fast burst hits the limit
        assert len(suppressed) >= kills - 10
    print(
        f"burst: {len(suppressed)} of {kills} kills header-less in {max(times) - min(times):.1f} s"
    )
