"""File trees that mirror the kernel's cgroup v2 (and v1) memory files, written by the tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

POD_UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CID = "a" * 64
CID2 = "b" * 64
POD = f"/kubepods/burstable/pod{POD_UID}"
CONTAINER = f"{POD}/{CID}"
CONTAINER2 = f"{POD}/{CID2}"


class FakeV2:
    """A cgroup v2 mount in a tmp dir; counters are written as the kernel would print them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def make(self, rel: str, *, limit: int | None = None, procs: str = "") -> Path:
        d = self.path(rel)
        d.mkdir(parents=True, exist_ok=True)
        self.events(rel)
        (d / "memory.events.local").write_text(_events(0, 0, 0))
        (d / "memory.current").write_text("0\n")
        (d / "memory.max").write_text("max\n" if limit is None else f"{limit}\n")
        (d / "memory.oom.group").write_text("0\n")
        (d / "memory.stat").write_text("anon 0\nfile 0\n")
        (d / "cgroup.procs").write_text(procs)
        (d / "cgroup.events").write_text(f"populated {1 if procs else 0}\nfrozen 0\n")
        return d

    def events(self, rel: str, oom: int = 0, oom_kill: int = 0, oom_group_kill: int = 0) -> None:
        (self.path(rel) / "memory.events").write_text(_events(oom, oom_kill, oom_group_kill))

    def kubelet_tree(self) -> None:
        for rel in ("/kubepods", "/kubepods/burstable", POD):
            self.make(rel)
        self.make(CONTAINER, limit=256 << 20, procs="4242\n")
        self.make(CONTAINER2, limit=128 << 20, procs="4343\n")


def _events(oom: int, oom_kill: int, oom_group_kill: int) -> str:
    return (
        f"low 0\nhigh 0\nmax {oom * 3}\noom {oom}\noom_kill {oom_kill}\n"
        f"oom_group_kill {oom_group_kill}\nsock_throttled 0\n"
    )


@pytest.fixture
def fake_v2(tmp_path: Path) -> FakeV2:
    tree = FakeV2(tmp_path / "cgroup")
    tree.kubelet_tree()
    return tree


class Clock:
    """A monotonic clock the test advances."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


Factory = Callable[..., object]
