"""Fixtures for the cgroup tests: a written v2 tree with a pod of two containers, a clock, and
a watcher of that tree on that clock that polls (no inotify)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cgroupfs import CgroupV2Tree
from support.clock import FakeClock

from oomwatch.cgroups import CgroupWatcher


@pytest.fixture
def fake_v2(tmp_path: Path) -> CgroupV2Tree:
    tree = CgroupV2Tree(tmp_path / "cgroup")
    tree.kubelet_tree()
    return tree


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def polling_watcher(fake_v2: CgroupV2Tree, clock: FakeClock) -> Iterator[CgroupWatcher]:
    watcher = CgroupWatcher(
        [str(fake_v2.root)],
        poll_interval_s=1.0,
        use_inotify=False,
        rescan_interval_s=3600.0,
        clock=clock,
    )
    yield watcher
    watcher.close()
