"""Attention where it is needed: a calm container is sampled once per cold interval, one near
its limit, growing, or attended to (a kill, a crossed threshold) every interval."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
from support import settled
from support.cgroupfs import CONTAINER, CONTAINER2, CgroupV2Tree

from oomwatch.cgroup_identity import identify
from oomwatch.cgroups import CgroupWatcher, TimelineSampler, WatchedCgroup
from oomwatch.cgroups.attention import (
    COLD_INTERVAL_S,
    HOT_HOLD_S,
    QUIET_INTERVAL_S,
    UsageThresholds,
    deepest,
    needs_attention,
)
from oomwatch.daemon.cgroup_view import CgroupView
from oomwatch.daemon.cgroup_worker import CgroupWorker
from oomwatch.incident import TimelineSample

MiB = 1 << 20


def _watched(tree: CgroupV2Tree, rel: str) -> WatchedCgroup:
    return WatchedCgroup(rel, str(tree.path(rel)), 2, identify(rel))


def _usage(tree: CgroupV2Tree, rel: str, usage_bytes: int) -> None:
    (tree.path(rel) / "memory.current").write_text(f"{usage_bytes}\n")


def _sampled_at(
    sampler: TimelineSampler, cgroups: list[WatchedCgroup], times: range
) -> dict[str, list[float]]:
    taken: dict[str, list[float]] = {cg.relpath: [] for cg in cgroups}
    for t in times:
        for cg, _sample in sampler.sample(cgroups, now_s=float(t)):
            taken[cg.relpath].append(float(t))
    return taken


def test_a_calm_container_is_sampled_every_cold_interval_one_near_its_limit_every_second(
    fake_v2: CgroupV2Tree,
) -> None:
    calm, near = _watched(fake_v2, CONTAINER), _watched(fake_v2, CONTAINER2)
    _usage(fake_v2, CONTAINER, 20 * MiB)  # of 256 MiB
    _usage(fake_v2, CONTAINER2, 100 * MiB)  # of 128 MiB
    sampler = TimelineSampler(interval_s=1.0, cold_interval_s=10.0)
    taken = _sampled_at(sampler, [calm, near], range(1000, 1060))
    assert taken[CONTAINER] == [1000.0, 1010.0, 1020.0, 1030.0, 1040.0, 1050.0]
    assert len(taken[CONTAINER2]) == 60
    sampler.close()


def test_growth_between_cold_samples_brings_a_container_to_every_second_for_a_while(
    fake_v2: CgroupV2Tree,
) -> None:
    cg = _watched(fake_v2, CONTAINER)
    _usage(fake_v2, CONTAINER, 20 * MiB)
    sampler = TimelineSampler(interval_s=1.0, cold_interval_s=10.0)
    assert _sampled_at(sampler, [cg], range(1000, 1005))[CONTAINER] == [1000.0]
    _usage(fake_v2, CONTAINER, 24 * MiB)  # +4 MiB: over 1 % of the 256 MiB limit
    taken = _sampled_at(sampler, [cg], range(1005, 1200))[CONTAINER]
    assert taken[:3] == [1010.0, 1011.0, 1012.0]  # seen grown at the next cold sample
    hot_until = 1010.0 + HOT_HOLD_S
    assert all(b - a == 1.0 for a, b in itertools.pairwise(taken) if b <= hot_until)
    assert taken[-1] - taken[-2] == 10.0  # calm again after the hold
    sampler.close()


def test_attend_samples_a_cgroups_containers_at_the_next_pass(fake_v2: CgroupV2Tree) -> None:
    cg = _watched(fake_v2, CONTAINER)
    sampler = TimelineSampler(interval_s=1.0, cold_interval_s=10.0)
    sampler.sample([cg], now_s=1000.0)
    sampler.attend(CONTAINER.rsplit("/", 1)[0], now_s=1000.5, hold_s=5.0)  # its pod was killed
    taken = _sampled_at(sampler, [cg], range(1001, 1030))[CONTAINER]
    assert taken == [1001.0, 1002.0, 1003.0, 1004.0, 1005.0, 1006.0, 1016.0, 1026.0]
    assert sampler.limits_bytes() == {CONTAINER: 256 * MiB}
    sampler.close()


def test_by_default_every_container_is_sampled_every_interval(fake_v2: CgroupV2Tree) -> None:
    cg = _watched(fake_v2, CONTAINER)
    sampler = TimelineSampler(interval_s=1.0)
    assert len(_sampled_at(sampler, [cg], range(1000, 1030))[CONTAINER]) == 30
    sampler.close()


@pytest.mark.parametrize(
    ("usage", "previous", "limit", "expected"),
    [
        (10, -1, None, False),  # no limit: no OOM of its own to see coming
        (64 * MiB, -1, 128 * MiB, True),  # half the limit
        (20 * MiB, 18 * MiB, 128 * MiB, True),  # grew by over 1 % of it
        (20 * MiB, 20 * MiB - 4096, 128 * MiB, False),
        (20 * MiB, -1, 128 * MiB, False),
    ],
)
def test_needs_attention(usage: int, previous: int, limit: int | None, expected: bool) -> None:
    assert needs_attention(usage, previous, limit) is expected


def test_thresholds_on_a_file_tree_fail_once_and_leave_sampling_alone(tmp_path: Path) -> None:
    """No cgroup.event_control (a v2 node, a fake tree): nothing armed, the reason kept."""
    thresholds = UsageThresholds()
    (tmp_path / "memory.usage_in_bytes").write_text("0\n")
    thresholds.arm("/c", str(tmp_path), 128 * MiB, 1.0)
    assert len(thresholds) == 0 and thresholds.crossed() == []
    thresholds.close()


def test_a_container_made_while_watched_is_sampled_every_second_as_it_starts(
    fake_v2: CgroupV2Tree,
) -> None:
    """Those found at the first pass are judged by their samples; one made later is starting
    up (its memory grows from nothing): every second for the hold."""
    calm, late = _watched(fake_v2, CONTAINER), _watched(fake_v2, CONTAINER2)
    sampler = TimelineSampler(interval_s=1.0, cold_interval_s=10.0)
    sampler.sample([calm], now_s=1000.0)
    taken = _sampled_at(sampler, [calm, late], range(1001, 1031))
    assert len(taken[CONTAINER]) == 3 and len(taken[CONTAINER2]) == 30
    sampler.close()


class _HeldThresholds(UsageThresholds):
    """The kernel holds a threshold for every container (a v1 node as root)."""

    def armed(self, relpath: str) -> bool:
        return True


def test_a_calm_container_whose_threshold_the_kernel_holds_is_sampled_every_quiet_interval(
    fake_v2: CgroupV2Tree,
) -> None:
    """The threshold says when usage reaches half the limit; growth below it still brings
    the container to every second at its next sample."""
    calm, near = _watched(fake_v2, CONTAINER), _watched(fake_v2, CONTAINER2)
    _usage(fake_v2, CONTAINER, 20 * MiB)  # of 256 MiB
    _usage(fake_v2, CONTAINER2, 100 * MiB)  # of 128 MiB
    sampler = TimelineSampler(
        interval_s=1.0, cold_interval_s=COLD_INTERVAL_S, thresholds=_HeldThresholds()
    )
    taken = _sampled_at(sampler, [calm, near], range(1000, 1100))
    assert taken[CONTAINER] == [1000.0 + k * QUIET_INTERVAL_S for k in range(4)]
    assert len(taken[CONTAINER2]) == 100
    _usage(fake_v2, CONTAINER, 24 * MiB)  # +4 MiB: over 1 % of its limit
    taken = _sampled_at(sampler, [calm], range(1100, 1140))
    assert taken[CONTAINER][:3] == [1120.0, 1121.0, 1122.0]
    sampler.close()


def test_a_pass_given_no_cgroups_keeps_the_last_watched_set(fake_v2: CgroupV2Tree) -> None:
    """The worker passes the watched set only when it changed: the same samples, at the same
    times, as when it passes it every time; a container left out is not sampled, its ring
    kept for its kill's timeline, and it is sampled at once when it is back."""
    calm, near = _watched(fake_v2, CONTAINER), _watched(fake_v2, CONTAINER2)
    _usage(fake_v2, CONTAINER, 20 * MiB)
    _usage(fake_v2, CONTAINER2, 100 * MiB)
    every, once = (TimelineSampler(interval_s=1.0, cold_interval_s=10.0) for _ in range(2))
    for t in range(1000, 1030):
        a = every.sample([calm, near], now_s=float(t))
        b = once.sample([calm, near] if t == 1000 else None, now_s=float(t))
        assert [(cg.relpath, s) for cg, s in a] == [(cg.relpath, s) for cg, s in b]
    left_out = [
        once.sample([near] if t == 1030 else None, now_s=float(t)) for t in range(1030, 1042)
    ]
    assert {cg.relpath for taken in left_out for cg, _ in taken} == {CONTAINER2}
    assert once.freeze(CONTAINER, 1041.0) is not None
    assert [cg.relpath for cg, _ in once.sample([calm, near], now_s=1042.0)] == [
        CONTAINER,
        CONTAINER2,
    ]
    every.close()
    once.close()


def test_deepest_names_whose_limit_it_was() -> None:
    pod = CONTAINER.rsplit("/", 1)[0]
    moved = {"/kubepods", "/kubepods/burstable", pod, CONTAINER}
    assert deepest(moved) == [CONTAINER]
    assert deepest({"/kubepods", "/kubepods/burstable", pod}) == [pod]  # the pod's own limit
    assert deepest({CONTAINER, CONTAINER2, pod}) == sorted([CONTAINER, CONTAINER2])
    assert deepest({"/a", "/a-b"}) == ["/a", "/a-b"]  # a sibling, not a child
    assert deepest(set()) == []


_MAX_EVENT = "low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\noom_group_kill 0\nsock_throttled 0\n"


def _woken_by_memory_events(tree: CgroupV2Tree, moved: tuple[str, ...]) -> set[str]:
    """The containers a running worker samples within 2 s of `moved`'s memory.events
    moving (written in that order), after a first pass that sampled every container."""
    tree.kubelet_tree()

    def watcher() -> CgroupWatcher:
        return CgroupWatcher([str(tree.root)], poll_interval_s=1.0, rescan_interval_s=3600.0)

    sampler = TimelineSampler(1.0, 60.0, cold_interval_s=COLD_INTERVAL_S)
    sampled: list[tuple[float, str]] = []
    seen = threading.Event()

    def on_samples(
        samples: list[tuple[WatchedCgroup, TimelineSample]], _now: float, _view: CgroupView
    ) -> None:
        sampled.extend((time.monotonic(), cg.relpath) for cg, _ in samples)
        if {CONTAINER, CONTAINER2} <= {rel for _, rel in sampled}:
            seen.set()

    worker = CgroupWorker(watcher, sampler, on_samples=on_samples, wake=lambda: None, log=_Log())
    worker.start()
    try:
        assert seen.wait(5.0)
        # the first pass sampled both; the next cold sample is 10 s away
        before = settled("the first sampling pass", lambda: len(sampled), 0.5, 5.0)
        moved_at = time.monotonic()
        for rel in moved:
            (tree.path(rel) / "memory.events").write_text(_MAX_EVENT)
        time.sleep(2.0)  # the window itself: two counter passes, for a split write's second half
        return {rel for t, rel in sampled[before:] if t - moved_at < 2.0}
    finally:
        worker.stop()


def test_a_v2_memory_event_wakes_the_sampler_for_that_container(fake_v2: CgroupV2Tree) -> None:
    """A calm container on v2 is read every 10 s; when its memory.events moves (the kernel
    counted `max`: it reclaimed at its limit) it is read at once, while its pod's and
    kubepods' memory.events, which move with it, wake no one else.  Written in the kernel's
    order (memcg_memory_event: the cgroup, then each ancestor), which a counter pass may see
    split: the ancestors' change a pass after the container's."""
    pod = CONTAINER.rsplit("/", 1)[0]
    moved = (CONTAINER, pod, "/kubepods/burstable", "/kubepods")
    assert _woken_by_memory_events(fake_v2, moved) == {CONTAINER}


def test_a_v2_pod_limit_event_wakes_the_pods_containers(fake_v2: CgroupV2Tree) -> None:
    """The pod hit its own limit (no container's memory.events moved): all its containers."""
    pod = CONTAINER.rsplit("/", 1)[0]
    moved = (pod, "/kubepods/burstable", "/kubepods")
    assert _woken_by_memory_events(fake_v2, moved) == {CONTAINER, CONTAINER2}


class _Log:
    def info(self, event: str, **fields: object) -> None: ...

    def warning(self, event: str, **fields: object) -> None: ...

    def error(self, event: str, **fields: object) -> None: ...

    def exception(self, event: str, **fields: object) -> None:
        raise AssertionError(event)
