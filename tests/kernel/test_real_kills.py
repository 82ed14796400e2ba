"""Real kernel OOM kills in scratch memcgs, decoded from what the kernel printed to /dev/kmsg.

Each test provokes its kill through the lab (small limits, cleanup always) and decodes the
raw records record by record, as the daemon does, through `parse_kmsg_record` and
`ReportAssembler`; incidents are picked by our own victim pids (others provoke kills here too).
"""

from __future__ import annotations

import mmap
import uuid

import pytest

from oomwatch.cgroup_identity import annotate
from oomwatch.lab import (
    ScratchMemcg,
    kubelet_layout,
    provoke_kill,
    spawn_hog,
    thp_unavailable_reason,
)

MIB = 1 << 20
KIB = 1 << 10
CONTAINER_ID = "c0ffee00" * 8

pytestmark = pytest.mark.kernel


# Hostile names: the kernel prints comm inside fixed text, and escapes control characters
# in /dev/kmsg as \xNN; the decoder must give back exactly the name (at most 15 bytes).
HOSTILE_COMMS = ["a) total-vm:1kB", "x,pid=1,uid=0", "evil\nKilled pro", "\x1b[31mred"]


@pytest.mark.parametrize("comm", ["plain-hog", *HOSTILE_COMMS])
def test_plain_kill(scratch: ScratchMemcg, comm: str) -> None:
    memcg = scratch.create_child("plain", 64 * MIB)
    capture = provoke_kill(memcg, mode="anon", mb=200, comm=comm)
    incident = capture.full_incident()
    hog = capture.hog

    assert (incident.kind, incident.constraint) == ("memcg", "CONSTRAINT_MEMCG")
    assert (incident.source_format, incident.header_suppressed) == ("kmsg", False)
    assert incident.kernel_time_s is not None and incident.kmsg_seq is not None
    assert incident.oom_memcg == incident.task_memcg == memcg.relpath
    assert incident.invoker is not None
    assert (incident.invoker.pid, incident.invoker.comm) == (hog.pid, comm)
    victim = incident.victim
    assert victim is not None
    assert (victim.pid, victim.comm) == (hog.pid, comm)
    # The interpreter's own pages were charged before the hog joined, so RSS may exceed the
    # limit a little; what the memcg holds is the limit.
    assert victim.anon_rss_bytes is not None
    assert 60 * MIB <= victim.anon_rss_bytes <= 64 * MIB + 32 * MIB
    assert incident.memcg is not None
    assert incident.memcg.limit_bytes == 64 * MIB
    assert incident.memcg.usage_bytes is not None and incident.memcg.usage_bytes >= 63 * MIB
    assert incident.breakdown_bytes is not None
    assert incident.breakdown_bytes.anon is not None
    assert incident.breakdown_bytes.anon >= 60 * MIB
    rows = [row for row in incident.tasks if row.pid == hog.pid]
    assert [row.name for row in rows] == [comm]
    assert memcg.oom_kill_count() == 1


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
@pytest.mark.parametrize("scope", ["pod", "container"])
def test_kubelet_hierarchy(scratch: ScratchMemcg, driver: str, scope: str) -> None:
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
    capture = provoke_kill(container, mode="anon", mb=300, comm="app")
    incident = annotate(capture.full_incident())

    expected_oom_memcg = pod_relpath if scope == "pod" else container.relpath
    assert incident.oom_memcg == expected_oom_memcg
    assert incident.task_memcg == container.relpath
    assert incident.memcg is not None
    assert incident.memcg.limit_bytes == (96 if scope == "pod" else 64) * MIB
    assert (incident.pod_uid, incident.container_id) == (pod_uid, CONTAINER_ID)
    assert (incident.qos_class, incident.limit_scope) == ("burstable", scope)
    assert (incident.cgroup_driver, incident.runtime) == (driver, "containerd")
    assert incident.victim is not None and incident.victim.pid == capture.hog.pid


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


def test_transparent_hugepages(scratch: ScratchMemcg) -> None:
    reason = thp_unavailable_reason()
    if reason:
        pytest.skip(reason)
    memcg = scratch.create_child("thp", 64 * MIB)
    incident = provoke_kill(memcg, mode="thp", mb=200, comm="thp-hog").full_incident()
    assert incident.memcg_stats is not None
    assert incident.memcg_stats["rss_huge"] > 0
    breakdown = incident.breakdown_bytes
    assert breakdown is not None and breakdown.thp is not None and breakdown.anon is not None
    assert breakdown.thp >= breakdown.anon // 2  # most of the anon memory is huge pages


def test_tmpfs_shmem_dominant(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("shm", 64 * MIB)
    incident = provoke_kill(memcg, mode="tmpfs", mb=200, comm="shm-writer").full_incident()
    breakdown = incident.breakdown_bytes
    assert breakdown is not None and breakdown.shmem is not None and breakdown.anon is not None
    assert breakdown.shmem >= 48 * MIB
    assert breakdown.shmem > 4 * breakdown.anon
    victim = incident.victim
    assert victim is not None and victim.anon_rss_bytes is not None
    # The files are not mapped: the victim's own RSS is small, the memcg is full of shmem.
    assert victim.anon_rss_bytes < breakdown.shmem // 2


def test_untouched_mapping(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("vm", 64 * MIB)
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


def test_oom_score_adj_picks_a_smaller_victim(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("adj", 128 * MIB)
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


def test_child_worker_killed_while_its_parent_lives(scratch: ScratchMemcg) -> None:
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
    victim = incident.victim
    assert victim is not None and (victim.pid, victim.comm) == (child, "dl-worker")
    names = {row.pid: row.name for row in incident.tasks}
    assert names == {parent.pid: "trainer-main", child: "dl-worker"}
    assert parent.poll() is None and memcg.pids() == [parent.pid]
