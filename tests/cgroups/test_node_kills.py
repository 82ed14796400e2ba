"""v1 counters are read only when the node's `oom_kill` (/proc/vmstat) moved: on v1 file trees."""

from __future__ import annotations

from pathlib import Path

from support.cgroupfs import CONTAINER, CONTAINER2, CgroupV1Tree, CgroupV2Tree
from support.clock import FakeClock

from oomwatch.cgroups import CgroupWatcher
from oomwatch.cgroups.node_kills import NodeOomKills

VMSTAT_HEAD = CgroupV1Tree.VMSTAT_HEAD
VMSTAT_TAIL = CgroupV1Tree.VMSTAT_TAIL


def _kills(watcher: CgroupWatcher, clock: FakeClock) -> list[tuple[str, int]]:
    clock.advance(1.0)
    return [(d.cgroup.relpath, d.oom_kill) for d in watcher.poll_changes()]


def _watcher(tree: CgroupV1Tree, clock: FakeClock, vmstat: str | None) -> CgroupWatcher:
    return CgroupWatcher(
        [str(tree.root)],
        use_inotify=False,
        rescan_interval_s=3600.0,
        clock=clock,
        node_vmstat=vmstat,
    )


def test_node_count_gates_polls_with_one_more_after_each_move(tmp_path: Path) -> None:
    tree = CgroupV1Tree(tmp_path)
    gate = NodeOomKills(str(tree.vmstat))
    assert gate.count() == 0
    assert [gate.moved(), gate.moved(), gate.moved()] == [True, True, False]
    tree.node_kills(3)
    assert [gate.moved(), gate.moved(), gate.moved()] == [True, True, False]
    gate.close()


def test_unknown_node_count_reads_every_poll(tmp_path: Path) -> None:
    without_key = tmp_path / "vmstat-before-4.13"
    without_key.write_text(VMSTAT_HEAD + VMSTAT_TAIL)
    for gate in (
        NodeOomKills(None),
        NodeOomKills(str(tmp_path / "absent")),
        NodeOomKills(str(without_key)),
    ):
        assert gate.count() is None
        assert all(gate.moved() for _ in range(4))
        gate.close()


def test_a_v1_kill_is_read_once_the_node_count_shows_it(tmp_path: Path) -> None:
    tree, clock = CgroupV1Tree(tmp_path), FakeClock()
    watcher = _watcher(tree, clock, str(tree.vmstat))
    assert _kills(watcher, clock) == []  # the first polls read every counter
    assert _kills(watcher, clock) == []
    # A counter that moved while the node's did not cannot be a kill: it is not read.
    tree.oom_control(CONTAINER, 1)
    assert _kills(watcher, clock) == []
    tree.node_kills(1)
    assert _kills(watcher, clock) == [(CONTAINER, 1)]
    # The kernel counts the node's kill a moment before the memcg's: the poll after the
    # move reads the counters once more and finds a kill that was counted late.
    tree.oom_control(CONTAINER2, 1)
    assert _kills(watcher, clock) == [(CONTAINER2, 1)]
    tree.oom_control(CONTAINER2, 2)
    assert _kills(watcher, clock) == []
    clock.advance(3600.0)  # the periodic rescan, the safety net, reads every counter
    assert _kills(watcher, clock) == [(CONTAINER2, 1)]
    watcher.close()


def test_without_a_node_count_every_poll_reads_v1_counters(tmp_path: Path) -> None:
    tree, clock = CgroupV1Tree(tmp_path), FakeClock()
    watcher = _watcher(tree, clock, None)
    assert _kills(watcher, clock) == []
    assert _kills(watcher, clock) == []
    tree.oom_control(CONTAINER, 2)
    assert _kills(watcher, clock) == [(CONTAINER, 2)]
    watcher.close()


def test_polled_v2_counters_are_read_every_poll_whatever_the_node_count(
    tmp_path: Path, fake_v2: CgroupV2Tree
) -> None:
    """The gate is for v1 alone: v2 `memory.events` also counts `oom` without a kill, and a
    v2 cgroup is polled only when its inotify watch failed."""
    vmstat = tmp_path / "vmstat"
    vmstat.write_text(f"{VMSTAT_HEAD}oom_kill 7\n{VMSTAT_TAIL}")  # never moves
    clock = FakeClock()
    watcher = CgroupWatcher(
        [str(fake_v2.root)],
        use_inotify=False,
        rescan_interval_s=3600.0,
        clock=clock,
        node_vmstat=str(vmstat),
    )
    assert _kills(watcher, clock) == []
    assert _kills(watcher, clock) == []
    fake_v2.events(CONTAINER, oom=1, oom_kill=1)
    assert _kills(watcher, clock) == [(CONTAINER, 1)]
    watcher.close()
