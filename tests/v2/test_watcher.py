"""The cgroup watcher and the sampler on a real cgroup v2 kernel: what tests/cgroups proves on
written file trees (test_watcher_v2.py), proven against memory.events as the kernel keeps it.
"""

from __future__ import annotations

import select
import time
import uuid
from collections.abc import Iterator

import pytest
from support.kernel_record import record, snapshot

from oomwatch.cgroups import CgroupWatcher, CounterDelta, TimelineSampler
from oomwatch.lab import Memcg, ScratchMemcg, kubelet_layout, spawn_hog

pytestmark = pytest.mark.kernel
MIB = 1 << 20
ROOT = "/sys/fs/cgroup"


@pytest.fixture
def watched(scratch_v2: ScratchMemcg) -> Iterator[tuple[ScratchMemcg, list[CgroupWatcher]]]:
    made: list[CgroupWatcher] = []
    yield scratch_v2, made
    for watcher in made:
        watcher.close()


def _watch(made: list[CgroupWatcher], **kwargs: object) -> CgroupWatcher:
    watcher = CgroupWatcher([ROOT], poll_interval_s=0.2, rescan_interval_s=3600.0, **kwargs)  # type: ignore[arg-type]
    made.append(watcher)
    return watcher


def _container(
    scratch: ScratchMemcg, *, pod_limit_mb: int | None = None, limit_mb: int | None = 64
) -> Memcg:
    return kubelet_layout(
        scratch,
        str(uuid.uuid4()),
        uuid.uuid4().hex * 2,
        driver="systemd",
        pod_limit_bytes=pod_limit_mb * MIB if pod_limit_mb else None,
        container_limit_bytes=limit_mb * MIB if limit_mb else None,
    )


def _ours(watcher: CgroupWatcher, scratch: ScratchMemcg, seconds: float) -> list[CounterDelta]:
    out: list[CounterDelta] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out += [
            d for d in watcher.poll_changes() if d.cgroup.relpath.startswith(scratch.relpath + "/")
        ]
        time.sleep(0.05)
    return out


def _kill(memcg: Memcg, comm: str) -> int:
    hog = spawn_hog(memcg, mode="anon", mb=200, comm=comm)
    assert hog.wait(timeout=60) == -9
    return hog.pid


def _rows(deltas: list[CounterDelta]) -> list[tuple[str, int, int, int, bool]]:
    return [(d.cgroup.relpath, d.oom, d.oom_kill, d.oom_group_kill, d.vanished) for d in deltas]


def test_inotify_wakes_on_a_real_kill_and_it_is_one_delta_at_the_container(
    watched: tuple[ScratchMemcg, list[CgroupWatcher]],
) -> None:
    scratch, made = watched
    container = _container(scratch)
    watcher = _watch(made)
    assert _ours(watcher, scratch, 0.3) == []  # a baseline, nothing more
    levels = {
        cg.relpath: cg.identity.level
        for cg in watcher.cgroups()
        if cg.relpath.startswith(scratch.relpath + "/")
    }
    assert levels[container.relpath] == "container"
    assert sorted(levels.values()) == ["container", "node", "pod", "qos"]
    _kill(container, "v2-watched")
    fd = watcher.fileno()
    assert fd is not None
    assert select.select([fd], [], [], 5.0)[0], "no inotify event for memory.events"
    deltas = _ours(watcher, scratch, 1.0)
    assert _rows(deltas) == [(container.relpath, 1, 1, 0, False)]
    assert watcher.oom_group(container.relpath) is False


def test_pod_limit_shows_the_oom_at_the_pod_and_the_kill_at_the_container(
    watched: tuple[ScratchMemcg, list[CgroupWatcher]],
) -> None:
    scratch, made = watched
    container = _container(scratch, pod_limit_mb=64, limit_mb=None)
    pod = container.relpath.rsplit("/", 1)[0]
    watcher = _watch(made)
    _ours(watcher, scratch, 0.3)
    before = snapshot(scratch)
    _kill(container, "v2-podlimit")
    deltas = _ours(watcher, scratch, 1.5)
    record(
        "watcher-pod-limit",
        [],
        scratch,
        before,
        container=container.relpath,
        pod=pod,
        deltas=_rows(deltas),
    )
    assert sorted(_rows(deltas)) == sorted(
        [(container.relpath, 0, 1, 0, False), (pod, 1, 0, 0, False)]
    )


def test_group_kill_counts_every_kill_line_and_one_group_kill(
    watched: tuple[ScratchMemcg, list[CgroupWatcher]],
) -> None:
    scratch, made = watched
    container = _container(scratch)
    container.set_oom_group()
    peer = spawn_hog(container, "idle", mb=4, comm="v2-peer")
    assert peer.wait_for("holding") == "holding"
    watcher = _watch(made)
    _ours(watcher, scratch, 0.3)
    _kill(container, "v2-group")
    assert peer.wait(10) == -9
    deltas = _ours(watcher, scratch, 1.5)
    # two processes, three kills counted: the primary once as victim, once as member
    assert _rows(deltas) == [(container.relpath, 1, 3, 1, False)]
    assert watcher.oom_group(container.relpath) is True


def test_container_removed_after_its_kill_is_attributed_to_the_pod_once(
    watched: tuple[ScratchMemcg, list[CgroupWatcher]],
) -> None:
    """Kubelet removes a dead container's cgroup quickly: the pod's hierarchical counters
    still show the kill, and the container shows as vanished (inotify IN_IGNORED)."""
    scratch, made = watched
    container = _container(scratch)
    pod = container.relpath.rsplit("/", 1)[0]
    watcher = _watch(made, use_inotify=False)  # read only after the removal
    _ours(watcher, scratch, 0.3)
    _kill(container, "v2-removed")
    container.fs_path.rmdir()
    watcher.rescan()
    deltas = _ours(watcher, scratch, 1.0)
    assert sorted(_rows(deltas)) == sorted(
        [(pod, 1, 1, 0, False), (container.relpath, 0, 0, 0, True)]
    )


def test_container_made_after_start_is_found_by_inotify_and_its_kill_counted_once(
    watched: tuple[ScratchMemcg, list[CgroupWatcher]],
) -> None:
    scratch, made = watched
    first = _container(scratch)
    watcher = _watch(made)
    _ours(watcher, scratch, 0.3)
    pod = next(m for m in scratch.memcgs() if m.relpath == first.relpath.rsplit("/", 1)[0])
    late = pod.create_child(f"cri-containerd-{'e' * 64}.scope", 48 * MIB)
    deltas = _ours(watcher, scratch, 1.0)  # the pod's directory watch reports it
    assert late.relpath in {cg.relpath for cg in watcher.cgroups()}
    _kill(late, "v2-late")
    deltas += _ours(watcher, scratch, 1.5)
    assert _rows(deltas) == [(late.relpath, 1, 1, 0, False)]


def test_sampler_reads_memory_current_and_v2_stat_names(scratch_v2: ScratchMemcg) -> None:
    container = _container(scratch_v2, limit_mb=200)
    watcher = CgroupWatcher([ROOT], use_inotify=False, include_limited=False)
    sampler = TimelineSampler(interval_s=0.25, window_s=60.0)
    try:
        [cg] = [c for c in watcher.cgroups() if c.relpath == container.relpath]
        hog = spawn_hog(
            container, mode="anon", mb=96, step_mb=8, step_interval_s=0.25, comm="v2-leak"
        )
        assert hog.wait_for("holding", timeout_s=60) == "holding"
        sampler.sample([cg], time.time())
        timeline = sampler.freeze(container.relpath, time.time())
        assert timeline is not None and timeline.samples
        last = timeline.samples[-1]
        assert last.limit_bytes == 200 * MIB
        assert last.usage_bytes >= 96 * MIB
        assert last.anon_bytes is not None and last.anon_bytes >= 90 * MIB
    finally:
        sampler.close()
        watcher.close()
