"""The watcher on counter files the real 6.1 and 6.12 kernels wrote (tests/data/kernel-v2):
each recorded tree is laid out as it was before the kill, watched, then given the files of
after the kill -- beside test_watcher_v2.py, whose trees the tests write by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.cgroupfs import lay_out
from support.clock import FakeClock

from oomwatch.cgroups import CgroupWatcher

DATA = Path(__file__).resolve().parents[1] / "data" / "kernel-v2"
KERNELS = sorted(p.name for p in DATA.iterdir() if p.is_dir())


def _replay(tmp_path: Path, kernel: str, scenario: str) -> tuple[list[Any], dict[str, Any]]:
    doc = json.loads((DATA / kernel / f"{scenario}.json").read_text())
    root = tmp_path / "cgroup"
    lay_out(root, doc["before"])
    clock = FakeClock()
    watcher = CgroupWatcher(
        [str(root)], use_inotify=False, rescan_interval_s=3600.0, clock=clock, node_vmstat=None
    )
    try:
        assert watcher.poll_changes() == []  # the counters before the kill: a baseline
        lay_out(root, doc["after"])
        clock.advance(1.0)
        deltas = watcher.poll_changes()
    finally:
        watcher.close()
    rows = [(d.cgroup.relpath, d.oom, d.oom_kill, d.oom_group_kill, d.vanished) for d in deltas]
    return rows, doc["facts"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_single_kill_is_one_delta_where_it_happened(tmp_path: Path, kernel: str) -> None:
    rows, facts = _replay(tmp_path, kernel, "single-kill")
    assert rows == [(facts["memcg"], 1, 1, 0, False)]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    "scenario", ["kubelet-systemd-pod-limit", "kubelet-cgroupfs-pod-limit", "watcher-pod-limit"]
)
def test_pod_limit_is_the_oom_at_the_pod_and_the_kill_at_the_container(
    tmp_path: Path, kernel: str, scenario: str
) -> None:
    rows, facts = _replay(tmp_path, kernel, scenario)
    assert sorted(rows) == sorted(
        [(facts["container"], 0, 1, 0, False), (facts["pod"], 1, 0, 0, False)]
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_container_limit_is_all_at_the_container(tmp_path: Path, kernel: str) -> None:
    rows, facts = _replay(tmp_path, kernel, "kubelet-systemd-container-limit")
    assert rows == [(facts["container"], 1, 1, 0, False)]


@pytest.mark.parametrize("kernel", KERNELS)
def test_group_kill_is_one_delta_with_the_primary_counted_twice(
    tmp_path: Path, kernel: str
) -> None:
    rows, facts = _replay(tmp_path, kernel, "group-kill")
    assert rows == [(facts["container"], 1, len(facts["members"]) + 1, 1, False)]
