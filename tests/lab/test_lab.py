"""The kernel lab itself: it cleans up, hogs join before allocating, names are right; on
cgroup v2 (the lab VM) it picks v2 and lays out v2's memory files at every level."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest
from support.kernel_tree import KernelTree

from oomwatch.cgroup_identity import identify
from oomwatch.cgroups.discovery import describe_memory_hierarchies
from oomwatch.incident import CgroupDriver, QosClass
from oomwatch.lab import (
    KmsgTail,
    ScratchMemcg,
    kmsg_message,
    kubelet_layout,
    lab_cgroup_version,
    memcg_v1_unavailable_reason,
    provoke_kill,
    spawn_hog,
)
from oomwatch.lab.kmsg import count_recent_headers
from oomwatch.lab.memcg import remove_stale_scratch

MIB = 1 << 20
CONTAINER_ID = "0123456789abcdef" * 4

kernel = pytest.mark.kernel


def _memcg_of(pid: int) -> str:
    """The process's memory cgroup: v1's `memory` line, else v2's unified `0::` line."""
    lines = [line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):
            return path
    for hierarchy, controllers, path in lines:
        if (hierarchy, controllers) == ("0", ""):
            return path
    raise AssertionError(f"pid {pid} has no memory cgroup line")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@kernel
def test_hog_joins_memcg_before_allocating(kernel_tree: KernelTree) -> None:
    scratch = kernel_tree.scratch
    memcg = scratch.create_child("c", 96 * MIB)
    hog = spawn_hog(memcg, "idle", mb=40, comm="joiner")
    assert hog.pid in memcg.pids()
    assert _memcg_of(hog.pid) == memcg.relpath
    assert hog.wait_for("holding", timeout_s=60) == "holding"
    # Every allocated page was charged here, so the hog joined before it allocated.
    assert memcg.usage_bytes() >= 40 * MIB  # memory.usage_in_bytes / memory.current
    assert memcg.stat()[kernel_tree.anon_stat] >= 40 * MIB
    assert memcg.limit_bytes() == 96 * MIB and scratch.limit_bytes() == 256 * MIB


@kernel
def test_comm_and_oom_score_adj_are_set(scratch: ScratchMemcg) -> None:
    hostile = "a) total-vm:1kB,pid=1"
    hog = spawn_hog(scratch, "idle", comm=hostile, oom_score_adj=777)
    assert Path(f"/proc/{hog.pid}/comm").read_text() == hostile[:15] + "\n"
    assert Path(f"/proc/{hog.pid}/oom_score_adj").read_text().strip() == "777"


@kernel
def test_cleanup_leaves_nothing_behind(memcg_v1: None) -> None:
    with ScratchMemcg(128 * MIB) as tree:
        container = kubelet_layout(tree, str(uuid.uuid4()), CONTAINER_ID, pod_limit_bytes=100 * MIB)
        holder = spawn_hog(container, "idle", mb=8)
        writer = spawn_hog(container, "tmpfs", mb=16, step_mb=4)
        # A child still allocating (slowly) when cleanup comes: a grandchild of the test.
        worker = spawn_hog(container, "child-worker", mb=64, step_mb=4, step_interval_s=10)
        writer.wait_for("holding")
        [child] = worker.wait_for_count("child ", 1)
        child_pid = int(child.split()[1])
        assert writer.tmpfs_dir is not None and any(writer.tmpfs_dir.iterdir())
        tmpfs_dir = writer.tmpfs_dir
        paths = [memcg.fs_path for memcg in tree.memcgs()]
        assert len(paths) == 5
        pids = [holder.pid, writer.pid, worker.pid, child_pid]
        assert sorted(container.pids()) == sorted(pids)
    assert not any(path.exists() for path in paths)
    assert not tmpfs_dir.exists()
    assert all(_gone(pid) for pid in pids)


@kernel
def test_cleanup_after_a_failing_test(memcg_v1: None) -> None:
    with pytest.raises(RuntimeError, match="midway"), ScratchMemcg(64 * MIB) as tree:
        hog = spawn_hog(tree.create_child("x"), "idle", mb=4)
        raise RuntimeError("test failed midway")
    assert not tree.fs_path.exists()
    assert _gone(hog.pid)


@kernel
def test_cleanup_releases_processes_it_did_not_start(memcg_v1: None) -> None:
    # a process that lives past the test's checks (it is killed at the end)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with ScratchMemcg(64 * MIB) as tree:
            tree.add_pid(stranger.pid)
            assert tree.pids() == [stranger.pid]
        assert stranger.poll() is None, "cleanup must not kill a process it did not start"
        assert _memcg_of(stranger.pid) == "/"
    finally:
        stranger.kill()
        stranger.wait()


def test_root_limit_is_capped() -> None:
    with pytest.raises(ValueError, match="512 MiB"):
        ScratchMemcg(1 << 30)


@kernel
@pytest.mark.parametrize(
    ("qos", "driver", "runtime", "expected_tail"),
    [
        ("burstable", "cgroupfs", "containerd", "/kubepods/burstable/pod{uid}/{cid}"),
        ("besteffort", "cgroupfs", "cri-o", "/kubepods/besteffort/pod{uid}/crio-{cid}"),
        ("guaranteed", "cgroupfs", "docker", "/kubepods/pod{uid}/{cid}"),
        (
            "burstable",
            "systemd",
            "containerd",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice"
            "/cri-containerd-{cid}.scope",
        ),
        (
            "besteffort",
            "systemd",
            "cri-o",
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice"
            "/crio-{cid}.scope",
        ),
        (
            "guaranteed",
            "systemd",
            "docker",
            "/kubepods.slice/kubepods-pod{uid_}.slice/docker-{cid}.scope",
        ),
    ],
)
def test_kubelet_layout_names(
    scratch: ScratchMemcg, qos: QosClass, driver: CgroupDriver, runtime: str, expected_tail: str
) -> None:
    uid = str(uuid.uuid4())
    container = kubelet_layout(
        scratch,
        uid,
        CONTAINER_ID,
        qos=qos,
        driver=driver,
        runtime=runtime,  # type: ignore[arg-type]
        pod_limit_bytes=96 * MIB,
    )
    tail = expected_tail.format(uid=uid, uid_=uid.replace("-", "_"), cid=CONTAINER_ID)
    assert container.relpath == scratch.relpath + tail
    assert container.fs_path.is_dir()
    pod = container.fs_path.parent
    assert int((pod / "memory.limit_in_bytes").read_text()) == 96 * MIB
    identity = identify(container.relpath)
    assert (identity.pod_uid, identity.container_id, identity.qos_class) == (uid, CONTAINER_ID, qos)
    assert (identity.driver, identity.level) == (driver, "container")
    if not (driver == "cgroupfs" and runtime == "docker"):  # a bare id does not name it
        assert identity.runtime == runtime


@kernel
def test_kmsg_tail_sees_new_records_only(memcg_v1: None) -> None:
    token = f"oomwatch-lab-selftest {uuid.uuid4()}"
    with KmsgTail() as tail:
        fd = os.open("/dev/kmsg", os.O_WRONLY)
        try:
            os.write(fd, f"<6>{token}\n".encode())
        finally:
            os.close(fd)
        records = tail.collect(
            until=lambda record: token.encode() in record, timeout_s=5, settle_s=0
        )
    assert [kmsg_message(record) for record in records] == [token]


@kernel
def test_child_worker_parent_survives_its_killed_child(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("worker", 64 * MIB)
    capture = provoke_kill(
        memcg, mode="child-worker", mb=200, comm="lab-worker", parent_comm="lab-main", linger_s=30
    )
    parent = capture.hog
    [child] = capture.victim_pids
    assert child != parent.pid
    assert parent.poll() is None and parent.pid in memcg.pids()
    assert parent.lines[-1] == "child-exit 9"  # wait status: killed by SIGKILL
    assert capture.killed_line(child) is not None
    assert b"(lab-worker)" in (capture.killed_line(child) or b"")
    assert memcg.oom_kill_count() == 1


def test_remove_stale_scratch_only_touches_dead_owners(tmp_path: Path) -> None:
    mount, shm = tmp_path / "memory", tmp_path / "shm"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    old = 1_000_000_000.0
    stale_tree = mount / f"oomwatch-lab-{dead.pid}-0badf00d"
    (stale_tree / "kubepods" / "burstable").mkdir(parents=True)
    stale_shm = shm / f"oomwatch-lab-{dead.pid}-0badf00d-3"
    stale_shm.mkdir(parents=True)
    (stale_shm / "part-0").write_bytes(b"x")
    young = mount / f"oomwatch-lab-{dead.pid}-0000beef"
    young.mkdir()
    alive = mount / f"oomwatch-lab-{os.getpid()}-0badcafe"
    alive.mkdir()
    unrelated = mount / "kubepods"
    unrelated.mkdir()
    for path in (stale_tree, stale_shm, alive, unrelated):
        os.utime(path, (old, old))

    removed = remove_stale_scratch(mount, shm)

    assert sorted(removed) == sorted([stale_tree, stale_shm])
    assert not stale_tree.exists() and not stale_shm.exists()
    assert young.exists() and alive.exists() and unrelated.exists()


def test_count_recent_headers_reads_the_kmsg_timestamp() -> None:
    records = [
        b"4,10,1000000,-;a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0\n",
        b"4,11,8000000,-;b invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0\n",
        b"3,12,8000100,-;Memory cgroup out of memory: Killed process 1 (b) total-vm:1kB\n",
        b"4,13,9000000,-;c) invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0\n",
        b"garbage invoked oom-killer:",
    ]
    assert count_recent_headers(records, now_us=10_000_000, window_s=5.5) == 2
    assert count_recent_headers(records, now_us=20_000_000, window_s=5.5) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="the root check comes first")
def test_unavailable_reason_names_what_is_missing(tmp_path: Path) -> None:
    reason = memcg_v1_unavailable_reason(tmp_path)
    assert reason is not None and "no cgroup v1 memory controller" in reason
    (tmp_path / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "memory.use_hierarchy").write_text("0\n")
    reason = memcg_v1_unavailable_reason(tmp_path)
    assert reason is not None and "use_hierarchy is 0" in reason
    (tmp_path / "memory.use_hierarchy").write_text("1\n")
    reason = memcg_v1_unavailable_reason(tmp_path, kmsg_path=str(tmp_path / "no-kmsg"))
    assert reason is not None and "no-kmsg" in reason
    assert memcg_v1_unavailable_reason(tmp_path, kmsg_path="/dev/null") is None


def test_unavailable_reason_when_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert memcg_v1_unavailable_reason() == (
        "not root (euid 1000): scratch memcgs and /dev/kmsg need root"
    )


# --- the lab on cgroup v2 only: it picks v2 where the memory controller is, and kubelet-like
# trees get v2's memory files at every level


@kernel
def test_the_lab_picks_v2_and_says_why_not_v1(memcg_v2: None) -> None:
    assert lab_cgroup_version() == 2
    assert memcg_v1_unavailable_reason() is not None
    # what `./dev.sh run` prints before it starts the agent
    assert describe_memory_hierarchies("/sys/fs/cgroup") == (
        "cgroup v2 (memory controller at /sys/fs/cgroup)"
    )
    with ScratchMemcg() as scratch:
        assert scratch.version == 2 and scratch.mount == Path("/sys/fs/cgroup")


@kernel
@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_kubelet_layout_names_and_memory_files_at_every_level(
    scratch_v2: ScratchMemcg, driver: str
) -> None:
    pod_uid, cid = str(uuid.uuid4()), "ab" * 32
    container = kubelet_layout(
        scratch_v2,
        pod_uid,
        cid,
        driver=driver,  # type: ignore[arg-type]
        pod_limit_bytes=128 * MIB,
        container_limit_bytes=64 * MIB,
    )
    identity = identify(container.relpath)
    assert (identity.level, identity.pod_uid, identity.container_id) == ("container", pod_uid, cid)
    assert identity.driver == driver
    for memcg in scratch_v2.memcgs():
        assert (memcg.fs_path / "memory.events").is_file(), memcg
    assert (container.fs_path / "memory.oom.group").read_text() == "0\n"
    container.set_oom_group()
    assert (container.fs_path / "memory.oom.group").read_text() == "1\n"


@kernel
def test_cleanup_kills_what_it_started_and_removes_the_tree(memcg_v2: None) -> None:
    with ScratchMemcg() as scratch:
        container = kubelet_layout(
            scratch, str(uuid.uuid4()), "cd" * 32, driver="systemd", container_limit_bytes=64 * MIB
        )
        hog = spawn_hog(container, "idle", mb=8, comm="v2-cleanup")
        assert hog.wait_for("holding", timeout_s=60) == "holding"
        root = scratch.fs_path
    assert not root.exists()
    assert not psutil.pid_exists(hog.pid) or psutil.Process(hog.pid).status() == "zombie"
