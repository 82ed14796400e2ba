"""Fixtures for the cgroup tests: a written v2 tree with a pod of two containers, a clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cgroupfs import CgroupV2Tree
from support.clock import FakeClock


@pytest.fixture
def fake_v2(tmp_path: Path) -> CgroupV2Tree:
    tree = CgroupV2Tree(tmp_path / "cgroup")
    tree.kubelet_tree()
    return tree


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
