"""The close watch after an OOM notification: it ends when the kill's counter rises (the
rise is what it dates), runs its window where a group kill can follow, and never outlives it."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cgroupfs import CONTAINER, CONTAINER2, POD, CgroupV2Tree
from support.clock import FakeClock

from oomwatch.cgroups import CgroupWatcher
from oomwatch.cgroups.oom_events import (
    HOT_POLL_INTERVAL_S,
    HOT_WINDOW_S,
    OomSignal,
    OomWitness,
)

_ANCESTORS = (POD, "/kubepods/burstable", "/kubepods")


def _counts(tree: CgroupV2Tree, rel: str, oom: int, oom_kill: int, group: int = 0) -> None:
    """The kernel's hierarchical `memory.events` after an OOM at `rel`'s own limit."""
    for at in (rel, *_ANCESTORS):
        tree.events(at, oom=oom, oom_kill=oom_kill, oom_group_kill=group)


def _passes_while_hot(watcher: CgroupWatcher, clock: FakeClock, limit: int = 1000) -> int:
    """Passes the worker makes at the hot interval until the close watch ends."""
    passes = 0
    while watcher.witness.hot and passes < limit:
        clock.advance(HOT_POLL_INTERVAL_S)
        watcher.poll_changes()
        passes += 1
    return passes


def test_the_watch_ends_at_the_pass_that_reads_the_kills_rise(
    fake_v2: CgroupV2Tree, clock: FakeClock, polling_watcher: CgroupWatcher
) -> None:
    watcher = polling_watcher
    _counts(fake_v2, CONTAINER, oom=1, oom_kill=0)  # the OOM began, its kill not yet
    clock.advance(1.0)
    assert [(d.cgroup.relpath, d.oom) for d in watcher.poll_changes()] == [(CONTAINER, 1)]
    assert watcher.witness.hot
    assert watcher.next_due_s() == clock.now + HOT_POLL_INTERVAL_S
    for _ in range(3):  # the kernel prints the report: nothing yet
        clock.advance(HOT_POLL_INTERVAL_S)
        assert watcher.poll_changes() == []
        assert watcher.witness.hot
    before_s = clock.now
    _counts(fake_v2, CONTAINER, oom=1, oom_kill=1)
    clock.advance(HOT_POLL_INTERVAL_S)
    (kill,) = watcher.poll_changes()
    # dated as closely as before: between the last two reads, 2 ms apart
    assert (kill.cgroup.relpath, kill.oom_kill) == (CONTAINER, 1)
    assert (kill.since_s, kill.observed_at_s) == (before_s, clock.now)
    assert not watcher.witness.hot
    assert watcher.next_due_s() >= clock.now + 0.9  # back to the poll timer


def test_an_oom_without_a_kill_is_watched_for_the_window_and_no_longer(
    fake_v2: CgroupV2Tree, clock: FakeClock, polling_watcher: CgroupWatcher
) -> None:
    watcher = polling_watcher
    _counts(fake_v2, CONTAINER, oom=1, oom_kill=0)  # reclaim won, or nothing to kill
    clock.advance(1.0)
    watcher.poll_changes()
    noted_s = clock.now
    passes = _passes_while_hot(watcher, clock)
    assert HOT_WINDOW_S <= clock.now - noted_s <= HOT_WINDOW_S + 2 * HOT_POLL_INTERVAL_S
    assert abs(passes - HOT_WINDOW_S / HOT_POLL_INTERVAL_S) <= 1


def test_an_oom_and_its_kill_read_together_need_no_close_watch(
    fake_v2: CgroupV2Tree, clock: FakeClock, polling_watcher: CgroupWatcher
) -> None:
    watcher = polling_watcher
    _counts(fake_v2, CONTAINER, oom=1, oom_kill=1)
    clock.advance(1.0)
    assert [(d.oom, d.oom_kill) for d in watcher.poll_changes()] == [(1, 1)]
    assert watcher.witness.signals  # the notification and its pids are still taken
    assert not watcher.witness.hot


def test_a_pod_limit_oom_ends_at_the_kill_in_its_container(
    fake_v2: CgroupV2Tree, clock: FakeClock, polling_watcher: CgroupWatcher
) -> None:
    watcher = polling_watcher
    for at in _ANCESTORS:
        fake_v2.events(at, oom=1, oom_kill=0)
    clock.advance(1.0)
    assert [(d.cgroup.relpath, d.oom) for d in watcher.poll_changes()] == [(POD, 1)]
    fake_v2.events(CONTAINER, oom=0, oom_kill=1)
    for at in _ANCESTORS:
        fake_v2.events(at, oom=1, oom_kill=1)
    assert _passes_while_hot(watcher, clock) == 1


def test_a_group_kill_keeps_the_watch_for_its_members(
    fake_v2: CgroupV2Tree, clock: FakeClock, polling_watcher: CgroupWatcher
) -> None:
    fake_v2.path(CONTAINER).joinpath("memory.oom.group").write_text("1\n")
    watcher = polling_watcher
    _counts(fake_v2, CONTAINER, oom=1, oom_kill=0)
    clock.advance(1.0)
    watcher.poll_changes()
    _counts(fake_v2, CONTAINER, oom=1, oom_kill=1)  # the first victim; its members follow
    clock.advance(HOT_POLL_INTERVAL_S)
    watcher.poll_changes()
    assert watcher.witness.hot
    _counts(fake_v2, CONTAINER, oom=1, oom_kill=3, group=1)
    clock.advance(HOT_POLL_INTERVAL_S)
    (members,) = watcher.poll_changes()
    assert (members.oom_kill, members.oom_group_kill) == (2, 1)
    assert members.since_s is not None  # the members' kills dated as closely as the first's
    assert members.observed_at_s - members.since_s == pytest.approx(HOT_POLL_INTERVAL_S)
    passes = _passes_while_hot(watcher, clock)
    assert passes <= HOT_WINDOW_S / HOT_POLL_INTERVAL_S  # the window still bounds it


def _witness(tmp_path: Path) -> OomWitness:
    for rel in (POD, CONTAINER, CONTAINER2):
        (tmp_path / rel.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return OomWitness(lambda rel: str(tmp_path / rel.lstrip("/")), eventfds=False)


def test_v1_a_subtree_notified_together_ends_together_and_a_later_oom_does_not(
    tmp_path: Path,
) -> None:
    witness = _witness(tmp_path)
    # v1 notifies the OOMing memcg's whole subtree: the pod and both containers
    for rel in (POD, CONTAINER, CONTAINER2):
        witness.note(OomSignal(rel, None, 10.0), 10.0)
    witness.note(OomSignal(CONTAINER2, None, 10.2), 10.2)  # its own OOM, later
    witness.settle([CONTAINER], lambda rel: False)  # the pod's victim was in CONTAINER
    assert witness.hot_cgroups(10.21) == {CONTAINER2}
    witness.settle([POD], lambda rel: False)  # a kill's counter at no watched ancestor
    assert witness.hot_cgroups(10.22) == {CONTAINER2}
    assert witness.hot_cgroups(10.2 + HOT_WINDOW_S + 0.001) == set()


def test_v1_a_kill_outside_the_watched_cgroups_ends_nothing(tmp_path: Path) -> None:
    witness = _witness(tmp_path)
    witness.note(OomSignal(CONTAINER, None, 10.0), 10.0)
    witness.settle([CONTAINER2, POD], lambda rel: False)
    assert witness.hot_cgroups(10.01) == {CONTAINER}
    asked: list[str] = []

    def grouped(rel: str) -> bool:
        asked.append(rel)
        return True

    witness.settle([CONTAINER], grouped)  # a group kill: its members follow, the watch stays
    assert asked == [CONTAINER]
    assert witness.hot_cgroups(10.02) == {CONTAINER}


def test_a_sibling_noted_in_the_same_pass_keeps_its_watch_for_its_own_kill(
    tmp_path: Path,
) -> None:
    witness = _witness(tmp_path)
    # a storm on v2: both containers' own `oom` rose in one pass (and the pod's with them)
    for rel in (POD, CONTAINER, CONTAINER2):
        witness.note(OomSignal(rel, None, 10.0), 10.0)
    witness.settle([CONTAINER], lambda rel: False)  # CONTAINER's kill came first
    assert witness.hot_cgroups(10.01) == {CONTAINER2}  # its kill is still to be dated
    witness.settle([CONTAINER2], lambda rel: False)
    assert witness.hot_cgroups(10.02) == set()
