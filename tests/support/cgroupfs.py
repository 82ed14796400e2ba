"""Cgroup file trees written as the kernel prints them, for tests without a real hierarchy:
`CgroupV2Tree` (a v2 mount: `make` one cgroup, `events` its counters, `kubelet_tree` a pod of
two containers; `kubelet_v2_tree` makes one with that pod), `CgroupV1Tree` (a v1 memory
mount and /proc/vmstat), `kubelet_container` (a v2 mount holding one container path
with this process in it, for the whole agent) and `lay_out` (files recorded from a real kernel)."""

from __future__ import annotations

import os
from pathlib import Path

POD_UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
CID = "a" * 64
CID2 = "b" * 64
POD = f"/kubepods/burstable/pod{POD_UID}"
CONTAINER = f"{POD}/{CID}"
CONTAINER2 = f"{POD}/{CID2}"
MIB = 1 << 20


def memory_events(oom: int = 0, oom_kill: int = 0, oom_group_kill: int = 0) -> str:
    """v2 `memory.events` (or `.local`) with these counts."""
    return (
        f"low 0\nhigh 0\nmax {oom * 3}\noom {oom}\noom_kill {oom_kill}\n"
        f"oom_group_kill {oom_group_kill}\nsock_throttled 0\n"
    )


class CgroupV2Tree:
    """A cgroup v2 mount in a tmp dir; counters are written as the kernel would print them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def make(
        self,
        rel: str,
        *,
        limit: int | None = None,
        procs: str = "",
        current_bytes: int = 0,
        stat: str = "anon 0\nfile 0\n",
    ) -> Path:
        d = self.path(rel)
        d.mkdir(parents=True, exist_ok=True)
        self.events(rel)
        (d / "memory.events.local").write_text(memory_events())
        (d / "memory.current").write_text(f"{current_bytes}\n")
        (d / "memory.max").write_text("max\n" if limit is None else f"{limit}\n")
        (d / "memory.oom.group").write_text("0\n")
        (d / "memory.stat").write_text(stat)
        (d / "cgroup.procs").write_text(procs)
        (d / "cgroup.events").write_text(f"populated {1 if procs else 0}\nfrozen 0\n")
        return d

    def events(self, rel: str, oom: int = 0, oom_kill: int = 0, oom_group_kill: int = 0) -> None:
        (self.path(rel) / "memory.events").write_text(memory_events(oom, oom_kill, oom_group_kill))

    def kubelet_tree(self) -> None:
        for rel in ("/kubepods", "/kubepods/burstable", POD):
            self.make(rel)
        self.make(CONTAINER, limit=256 << 20, procs="4242\n")
        self.make(CONTAINER2, limit=128 << 20, procs="4343\n")


def kubelet_v2_tree(directory: Path) -> CgroupV2Tree:
    """A v2 mount at `directory`/cgroup holding `POD` with `CONTAINER` and `CONTAINER2` (the
    `fake_v2` fixture's tree)."""
    tree = CgroupV2Tree(directory / "cgroup")
    tree.kubelet_tree()
    return tree


def kubelet_container(root: Path, container: str, limit_bytes: int = 32 * MIB) -> Path:
    """A v2 mount at `root` with every level of the `container` path (1 MiB used, the
    container limited to `limit_bytes`); the container holds one live process, this test's
    own (the agent checks /proc that a listed process is not exiting).  Its directory."""
    tree = CgroupV2Tree(root)
    parts = [p for p in container.split("/") if p]
    for depth in range(1, len(parts) + 1):
        leaf = depth == len(parts)
        tree.make(
            "/".join(parts[:depth]),
            limit=limit_bytes if leaf else None,
            procs=f"{os.getpid()}\n" if leaf else "",
            current_bytes=MIB,
            stat=f"anon {MIB}\nfile 0\nshmem 0\n",
        )
    return tree.path(container)


class CgroupV1Tree:
    """A cgroup v1 memory mount and a /proc/vmstat, written as the kernel prints them."""

    VMSTAT_HEAD = "nr_free_pages 123\nnr_zone_inactive_anon 4\n"
    VMSTAT_TAIL = "thp_fault_alloc 0\nthp_fault_fallback 0\n"

    def __init__(self, root: Path) -> None:
        self.root = root / "memory"
        self.vmstat = root / "vmstat"
        self.root.mkdir(parents=True)
        (self.root / "memory.usage_in_bytes").write_text("0\n")
        self.node_kills(0)
        for rel in ("/kubepods", "/kubepods/burstable", POD, CONTAINER, CONTAINER2):
            d = self.root / rel.lstrip("/")
            d.mkdir(parents=True)
            (d / "memory.limit_in_bytes").write_text(f"{256 << 20}\n")
            self.oom_control(rel, 0)

    def oom_control(self, rel: str, oom_kill: int) -> None:
        text = f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom_kill}\n"
        (self.root / rel.lstrip("/") / "memory.oom_control").write_text(text)

    def node_kills(self, oom_kill: int) -> None:
        self.vmstat.write_text(f"{self.VMSTAT_HEAD}oom_kill {oom_kill}\n{self.VMSTAT_TAIL}")


def lay_out(root: Path, files: dict[str, dict[str, str]]) -> None:
    """Write `files` ({relpath: {file name: text}}) under a v2 mount at `root`."""
    CgroupV2Tree(root)
    for relpath, content in files.items():
        directory = root / relpath.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in content.items():
            (directory / name).write_text(text)
