"""The cgroup file builders write what the agent's own parsers and watcher read."""

from __future__ import annotations

import os
from pathlib import Path

from oomwatch.cgroups import CgroupWatcher
from oomwatch.cgroups.counters import OomCounters, parse_memory_events, parse_oom_control
from oomwatch.cgroups.files import parse_limit_bytes
from support.cgroupfs import (
    CONTAINER,
    MIB,
    CgroupV1Tree,
    kubelet_container,
    kubelet_v2_tree,
    lay_out,
    memory_events,
)
from support.clock import FakeClock


def test_memory_events_reads_back_as_the_counts_written() -> None:
    assert parse_memory_events(memory_events(2, 1, 1).encode()) == OomCounters(2, 1, 1)


def test_a_v2_kubelet_tree_is_watched_and_a_written_kill_is_one_delta(tmp_path: Path) -> None:
    tree = kubelet_v2_tree(tmp_path)
    assert parse_limit_bytes(tree.path(CONTAINER).joinpath("memory.max").read_bytes()) == 256 * MIB
    clock = FakeClock()
    watcher = CgroupWatcher(
        [str(tree.root)], use_inotify=False, rescan_interval_s=3600.0, clock=clock, node_vmstat=None
    )
    try:
        assert watcher.poll_changes() == []
        tree.events(CONTAINER, oom=1, oom_kill=1)
        clock.advance(1.0)
        [delta] = watcher.poll_changes()
    finally:
        watcher.close()
    assert (delta.cgroup.relpath, delta.oom_kill) == (CONTAINER, 1)


def test_kubelet_container_holds_this_process_at_every_level(tmp_path: Path) -> None:
    leaf = kubelet_container(tmp_path / "cgroup", CONTAINER, limit_bytes=64 * MIB)
    assert leaf == tmp_path / "cgroup" / CONTAINER.lstrip("/")
    assert (leaf / "cgroup.procs").read_text() == f"{os.getpid()}\n"
    assert (leaf / "memory.max").read_text() == f"{64 * MIB}\n"
    assert (leaf.parent / "memory.max").read_text() == "max\n"
    assert (leaf / "memory.current").read_text() == f"{MIB}\n"


def test_a_v1_tree_and_vmstat(tmp_path: Path) -> None:
    tree = CgroupV1Tree(tmp_path)
    tree.oom_control(CONTAINER, 3)
    tree.node_kills(5)
    oom_control = (tree.root / CONTAINER.lstrip("/") / "memory.oom_control").read_bytes()
    assert parse_oom_control(oom_control).oom_kill == 3
    assert "oom_kill 5\n" in tree.vmstat.read_text()


def test_lay_out_writes_recorded_files_under_a_v2_mount(tmp_path: Path) -> None:
    lay_out(tmp_path / "cg", {"/a/b": {"memory.events": memory_events(1, 1)}})
    assert (tmp_path / "cg" / "cgroup.controllers").is_file()
    assert parse_memory_events((tmp_path / "cg/a/b/memory.events").read_bytes()).oom_kill == 1
