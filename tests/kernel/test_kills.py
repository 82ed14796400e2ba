"""Real kernel OOM kills in scratch memcgs, decoded from what the kernel printed to /dev/kmsg,
and diagnosed: each scenario yields its finding and no other.

Each test provokes its kill through the lab (small limits, cleanup always) and decodes the
raw records record by record, as the daemon does, through `parse_kmsg_record` and
`ReportAssembler`; incidents are picked by our own victim pids (others provoke kills here too).
The tests that take `kernel_tree` run on both cgroup versions (v1 here, v2 in the lab VM,
tests/vm) and record the v2 scenarios as fixtures for the fast tests (`record`); those marked
`host_only` say why the lab VM leaves them out; those on `scratch` alone test the decoder on
one version, the group kill exists only on v2.
"""

from __future__ import annotations

import mmap
import uuid

import pytest
from support.kernel_record import record, snapshot
from support.kernel_tree import KernelTree, node_findings

from oomwatch.cgroup_identity import annotate
from oomwatch.diagnosis import diagnose
from oomwatch.incident import Incident
from oomwatch.lab import (
    ScratchMemcg,
    kubelet_layout,
    provoke_kill,
    spawn_hog,
    thp_unavailable_reason,
)

MIB = 1 << 20
CONTAINER_ID = "c0ffee00" * 8

pytestmark = pytest.mark.kernel


def _codes(incident: Incident) -> set[str]:
    """The incident's findings, less those the node's settings add to any kill."""
    codes: set[str] = {f.code for f in incident.findings}
    return codes - node_findings()


def test_single_kill(kernel_tree: KernelTree) -> None:
    scratch = kernel_tree.scratch
    memcg = scratch.create_child("plain", 64 * MIB)
    before = snapshot(scratch)
    capture = provoke_kill(memcg, mode="anon", mb=200, comm="plain-hog")
    incident = capture.full_incident()
    hog = capture.hog
    if kernel_tree.records_fixtures:
        record(
            "single-kill", capture.records, scratch, before, victim_pid=hog.pid, memcg=memcg.relpath
        )

    assert (incident.kind, incident.constraint) == ("memcg", "CONSTRAINT_MEMCG")
    assert (incident.source_format, incident.header_suppressed) == ("kmsg", False)
    assert incident.kernel_time_s is not None and incident.kmsg_seq is not None
    assert incident.oom_memcg == incident.task_memcg == memcg.relpath
    assert incident.invoker is not None
    assert (incident.invoker.pid, incident.invoker.comm) == (hog.pid, "plain-hog")
    victim = incident.victim
    assert victim is not None and (victim.pid, victim.comm) == (hog.pid, "plain-hog")
    # The interpreter's own pages were charged before the hog joined, so RSS may exceed the
    # limit a little; what the memcg holds is the limit.
    assert victim.anon_rss_bytes is not None
    assert 60 * MIB <= victim.anon_rss_bytes <= 64 * MIB + 32 * MIB
    assert incident.memcg is not None and incident.memcg.limit_bytes == 64 * MIB
    assert incident.memcg.usage_bytes is not None and incident.memcg.usage_bytes >= 63 * MIB
    # each version prints its own memory.stat names (v1 rss/cache, v2 anon/file)
    assert incident.memcg_stats is not None and kernel_tree.anon_stat in incident.memcg_stats
    assert kernel_tree.other_anon_stat not in incident.memcg_stats
    breakdown = incident.breakdown_bytes
    assert breakdown is not None and breakdown.anon is not None and breakdown.anon >= 60 * MIB
    assert [row.name for row in incident.tasks if row.pid == hog.pid] == ["plain-hog"]
    assert memcg.oom_kill_count() == 1
    if kernel_tree.counts_events:
        # memory.events counts hierarchically, memory.events.local only here
        assert (memcg.events()["oom"], memcg.events()["oom_kill"]) == (1, 1)
        assert memcg.events(local=True)["oom_kill"] == 1
        assert scratch.events()["oom_kill"] == 1 and scratch.events(local=True)["oom_kill"] == 0


# Hostile names: the kernel prints comm inside fixed text, and escapes control characters
# in /dev/kmsg as \xNN; the decoder must give back exactly the name (at most 15 bytes).
HOSTILE_COMMS = ["a) total-vm:1kB", "x,pid=1,uid=0", "evil\nKilled pro", "\x1b[31mred"]


@pytest.mark.parametrize("comm", HOSTILE_COMMS)
def test_hostile_process_name_is_decoded_exactly(scratch: ScratchMemcg, comm: str) -> None:
    memcg = scratch.create_child("plain", 64 * MIB)
    capture = provoke_kill(memcg, mode="anon", mb=200, comm=comm)
    incident = capture.full_incident()
    hog = capture.hog
    assert incident.invoker is not None
    assert (incident.invoker.pid, incident.invoker.comm) == (hog.pid, comm)
    victim = incident.victim
    assert victim is not None and (victim.pid, victim.comm) == (hog.pid, comm)
    assert incident.oom_memcg == incident.task_memcg == memcg.relpath
    assert [row.name for row in incident.tasks if row.pid == hog.pid] == [comm]
    assert memcg.oom_kill_count() == 1


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("scope", ["pod", "container"])
def test_kubelet_hierarchy(kernel_tree: KernelTree, driver: str, scope: str) -> None:
    scratch = kernel_tree.scratch
    pod_uid = str(uuid.uuid4())
    container = kubelet_layout(
        scratch,
        pod_uid,
        CONTAINER_ID,
        qos="burstable",
        driver=driver,  # type: ignore[arg-type]
        pod_limit_bytes=96 * MIB,
        container_limit_bytes=64 * MIB if scope == "container" else None,
    )
    pod_relpath = container.relpath.rsplit("/", 1)[0]
    before = snapshot(scratch)
    capture = provoke_kill(container, mode="anon", mb=300, comm="app")
    incident = annotate(capture.full_incident())
    if kernel_tree.records_fixtures:
        record(
            f"kubelet-{driver}-{scope}-limit",
            capture.records,
            scratch,
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
    assert incident.victim is not None and incident.victim.pid == capture.hog.pid
    assert container.oom_kill_count() == 1
    if kernel_tree.counts_events:
        # the OOM is counted where the limit was hit, the kill where the victim lived
        pod = next(m for m in scratch.memcgs() if m.relpath == pod_relpath)
        local_oom = (pod if scope == "pod" else container).events(local=True)["oom"]
        assert local_oom == 1
        assert container.events(local=True)["oom_kill"] == 1
        assert pod.events()["oom_kill"] == 1
    if scope == "pod":
        diagnosed = diagnose(incident)
        assert _codes(diagnosed) == {"limit-pod"}
        assert diagnosed.recommendation is not None
        # Sized from the pod's usage the report printed: the limit on a real kernel, or a
        # little under it where pages were uncharged between the failed charge and the
        # printing (v2 in the lab VM once printed enough less to advise 115Mi, not 116Mi).
        usage = incident.memcg.usage_bytes
        assert usage is not None and 92 * MIB <= usage <= 96 * MIB
        expected_bytes = -(-usage * 12 // 10 // MIB) * MIB  # 20 % above, rounded up to Mi
        assert diagnosed.recommendation["memory_limit_bytes"] == expected_bytes
        assert diagnosed.recommendation["memory_limit"] == f"{expected_bytes // MIB}Mi"


def test_node_allocatable_limit(scratch: ScratchMemcg) -> None:
    """A limit on kubepods itself (node allocatable enforcement) is the one that was hit."""
    kubepods = scratch.create_child("kubepods", 64 * MIB)
    pod_uid = str(uuid.uuid4())
    container = kubelet_layout(scratch, pod_uid, CONTAINER_ID, qos="besteffort")
    incident = annotate(provoke_kill(container, mode="anon", mb=200).full_incident())
    assert (incident.oom_memcg, incident.task_memcg) == (kubepods.relpath, container.relpath)
    assert (incident.limit_scope, incident.qos_class, incident.pod_uid) == (
        "node",
        "besteffort",
        pod_uid,
    )


def test_transparent_hugepages(kernel_tree: KernelTree) -> None:
    reason = thp_unavailable_reason()
    if reason:
        pytest.skip(reason)
    memcg = kernel_tree.scratch.create_child("thp", 96 * MIB)
    incident = provoke_kill(memcg, mode="thp", mb=200, comm="thp-hog").full_incident()
    assert incident.memcg_stats is not None
    assert incident.memcg_stats[kernel_tree.thp_stat] > 0
    breakdown = incident.breakdown_bytes
    assert breakdown is not None and breakdown.thp is not None and breakdown.anon is not None
    assert breakdown.thp >= breakdown.anon // 2  # most of the anon memory is huge pages
    diagnosed = diagnose(annotate(incident))
    assert {f.code for f in diagnosed.findings} == {"limit-cgroup", "thp-hidden"}
    thp = next(f for f in diagnosed.findings if f.code == "thp-hidden")
    assert thp.evidence["thp_bytes"] >= 32 * MIB


def test_tmpfs_shmem_dominant(kernel_tree: KernelTree) -> None:
    memcg = kernel_tree.scratch.create_child("shm", 64 * MIB)
    incident = provoke_kill(memcg, mode="tmpfs", mb=200, comm="shm-writer").full_incident()
    breakdown = incident.breakdown_bytes
    assert breakdown is not None and breakdown.shmem is not None and breakdown.anon is not None
    assert breakdown.shmem >= 48 * MIB
    assert breakdown.shmem > 4 * breakdown.anon
    victim = incident.victim
    assert victim is not None and victim.anon_rss_bytes is not None
    # The files are not mapped: the victim's own RSS is small, the memcg is full of shmem.
    assert victim.anon_rss_bytes < breakdown.shmem // 2
    diagnosed = diagnose(annotate(incident))
    assert _codes(diagnosed) == {"limit-cgroup", "tmpfs-shmem"}
    shm = next(f for f in diagnosed.findings if f.code == "tmpfs-shmem")
    assert shm.evidence["shmem_bytes"] >= 48 * MIB


# The task list the kernel prints (dump_tasks) is the same on both versions: its v2 form is
# decoded by every [v2] kill above.
SAME_TASK_LIST = "the task list is printed alike on both versions (every [v2] kill decodes it)"


@pytest.mark.host_only(SAME_TASK_LIST)
def test_untouched_mapping(kernel_tree: KernelTree) -> None:
    memcg = kernel_tree.scratch.create_child("vm", 64 * MIB)
    capture = provoke_kill(
        memcg, mode="untouched-mapping", mb=200, reserve_mb=4096, comm="reserver"
    )
    incident = capture.full_incident()
    victim = incident.victim
    assert victim is not None
    assert victim.total_vm_bytes is not None and victim.anon_rss_bytes is not None
    assert victim.total_vm_bytes >= 4096 * MIB
    assert victim.total_vm_bytes >= 20 * victim.anon_rss_bytes
    [row] = [row for row in incident.tasks if row.pid == capture.hog.pid]
    assert row.total_vm_pages is not None
    assert row.total_vm_pages * mmap.PAGESIZE >= 4096 * MIB
    diagnosed = diagnose(annotate(incident))
    assert _codes(diagnosed) == {"limit-cgroup", "overcommit-vm"}
    vm = next(f for f in diagnosed.findings if f.code == "overcommit-vm")
    assert vm.evidence["total_vm_bytes"] >= 4096 * MIB


@pytest.mark.host_only(SAME_TASK_LIST)
def test_oom_score_adj_picks_a_smaller_victim(kernel_tree: KernelTree) -> None:
    memcg = kernel_tree.scratch.create_child("adj", 128 * MIB)
    # Lowering oom_score_adj below 0 needs CAP_SYS_RESOURCE (not granted here): the larger
    # hog keeps the default 0 and the small one volunteers with 1000.
    big = spawn_hog(memcg, "idle", mb=80, comm="big-default")
    assert big.wait_for("holding") == "holding"
    capture = provoke_kill(memcg, mode="anon", mb=200, comm="small-adj", oom_score_adj=1000)
    incident = capture.full_incident()

    victim = incident.victim
    assert victim is not None
    assert (victim.pid, victim.comm, victim.oom_score_adj) == (capture.hog.pid, "small-adj", 1000)
    rows = {row.pid: row for row in incident.tasks}
    big_row, small_row = rows[big.pid], rows[capture.hog.pid]
    assert big_row.oom_score_adj == 0 and small_row.oom_score_adj == 1000
    assert big_row.rss_pages is not None and small_row.rss_pages is not None
    assert big_row.rss_pages > small_row.rss_pages, "the victim must not be the largest task"
    assert big.poll() is None, "the larger hog with the default score survives"
    diagnosed = diagnose(annotate(incident))
    assert _codes(diagnosed) == {"limit-cgroup", "score-adj-victim"}
    finding = next(f for f in diagnosed.findings if f.code == "score-adj-victim")
    assert finding.evidence["largest_pid"] == big.pid


def test_child_worker_killed_while_its_parent_lives(kernel_tree: KernelTree) -> None:
    scratch = kernel_tree.scratch
    memcg = scratch.create_child("worker", 64 * MIB)
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
    if kernel_tree.records_fixtures:
        record(
            "child-worker",
            capture.records,
            scratch,
            victim_pid=child,
            parent_pid=parent.pid,
            memcg=memcg.relpath,
        )
    victim = incident.victim
    assert victim is not None and (victim.pid, victim.comm) == (child, "dl-worker")
    names = {row.pid: row.name for row in incident.tasks}
    assert names == {parent.pid: "trainer-main", child: "dl-worker"}
    assert parent.poll() is None and memcg.pids() == [parent.pid]
    assert memcg.oom_kill_count() == 1


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


BURST_KILLS = 16


def test_burst_of_kills_decodes_every_kill_once(kernel_tree: KernelTree) -> None:
    """The kernel prints at most 10 report headers per 5 s, the rest are bare `Killed
    process` lines: every kill must still become exactly one incident."""
    scratch = kernel_tree.scratch
    memcg = scratch.create_child("burst", 32 * MIB)
    capture = provoke_kill(
        memcg, mode="child-worker", children=BURST_KILLS, mb=96, comm="burst-child", linger_s=0
    )
    if kernel_tree.records_fixtures:
        record(
            "burst", capture.records, scratch, victim_pids=capture.victim_pids, memcg=memcg.relpath
        )
    assert len(capture.victim_pids) == BURST_KILLS
    assert memcg.oom_kill_count() == BURST_KILLS

    incidents = capture.incidents()
    by_victim = {incident.victims[0].pid: incident for incident in incidents}
    assert len(incidents) == BURST_KILLS, f"{len(incidents)} incidents for {BURST_KILLS} kills"
    assert sorted(by_victim) == sorted(capture.victim_pids)

    suppressed = [pid for pid, incident in by_victim.items() if incident.header_suppressed]
    for pid, incident in by_victim.items():
        # An incident is header_suppressed exactly when the kernel printed no report for it.
        assert incident.header_suppressed == (not capture.has_full_report(pid))
        assert incident.victims[0].comm == "burst-child"
        if incident.header_suppressed:
            assert incident.tasks == [] and incident.oom_memcg is None
        else:
            assert incident.task_memcg == memcg.relpath
    times = [i.kernel_time_s for i in incidents if i.kernel_time_s is not None]
    assert len(times) == BURST_KILLS
    burst_s = max(times) - min(times)
    # 10 headers per 5 s node-wide: a burst shorter than that leaves at least 6 unprinted.  How
    # long it takes is the machine's (an emulated CPU is slow), not a claim of the decoder.
    if burst_s < 5:
        assert len(suppressed) >= BURST_KILLS - 10
    print(f"burst: {len(suppressed)} of {BURST_KILLS} kills header-less in {burst_s:.1f} s")

    # Diagnosed alone (no history), a header-less kill says only that its report was withheld.
    for incident in incidents:
        codes = _codes(diagnose(annotate(incident)))
        if incident.header_suppressed:
            assert codes == {"rate-limited-report"}
        else:
            assert "rate-limited-report" not in codes
    # The third kill of the same workload, diagnosed with the two before it, is a crash loop.
    ordered = sorted(incidents, key=lambda i: i.kernel_time_s or 0.0)
    first = [annotate(i) for i in ordered[:3]]
    third = diagnose(first[2], history=first[:2])
    loop = next(f for f in third.findings if f.code == "crash-loop")
    assert loop.evidence["kills_in_window"] == 3
    expected = {"crash-loop", "rate-limited-report" if third.header_suppressed else "limit-cgroup"}
    assert _codes(third) == expected
