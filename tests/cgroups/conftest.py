"""Fixtures for the cgroup tests: a clock, and a watcher that polls (no inotify) the root
fixture `fake_v2` (a written v2 tree with a pod of two containers) on that clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.cgroupfs import CgroupV2Tree
from support.clock import FakeClock

from oomwatch.cgroups import CgroupWatcher


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
