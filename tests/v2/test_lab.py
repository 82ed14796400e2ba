"""The lab itself on cgroup v2: it picks v2 where the memory controller is, kubelet-like trees
get memory files at every level, and cleanup leaves nothing (that hogs join before they
allocate is tests/lab, on both versions).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import psutil
import pytest

from oomwatch.cgroup_identity import identify
from oomwatch.cgroups.discovery import describe_memory_hierarchies
from oomwatch.lab import (
    ScratchMemcg,
    kubelet_layout,
    lab_cgroup_version,
    memcg_v1_unavailable_reason,
    spawn_hog,
)

pytestmark = pytest.mark.kernel
MIB = 1 << 20


def test_the_lab_picks_v2_and_says_why_not_v1(memcg_v2: None) -> None:
    assert lab_cgroup_version() == 2
    assert memcg_v1_unavailable_reason() is not None
    # what `./dev.sh run` prints before it starts the agent
    assert describe_memory_hierarchies("/sys/fs/cgroup") == (
        "cgroup v2 (memory controller at /sys/fs/cgroup)"
    )
    with ScratchMemcg() as scratch:
        assert scratch.version == 2 and scratch.mount == Path("/sys/fs/cgroup")


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
