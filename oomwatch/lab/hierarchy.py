"""Which cgroup hierarchy holds the memory controller here, and its files, v1 or v2.

The memory controller sits on exactly one hierarchy: the v1 `memory` mount (this project's
own machines) or the unified v2 tree (most nodes today).  The lab uses whichever has it and
says which; `CgroupFiles` hides the differences in file names and formats
(Documentation/admin-guide/cgroup-v2.rst and cgroup-v1/memory.rst).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Literal

from oomwatch.cgroups.files import keyed_value

Version = Literal[1, 2]
MEMCG_V1_ROOT = Path("/sys/fs/cgroup/memory")
CGROUP_V2_ROOT = Path("/sys/fs/cgroup")
KMSG_PATH = "/dev/kmsg"


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _common_reason(root: Path, kmsg_path: str) -> str | None:
    if os.geteuid() != 0:
        return f"not root (euid {os.geteuid()}): scratch memcgs and /dev/kmsg need root"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable (read-only cgroup mount?)"
    try:
        fd = os.open(kmsg_path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return f"cannot read {kmsg_path}: {exc}"
    os.close(fd)
    return None


def memcg_v1_unavailable_reason(
    root: Path = MEMCG_V1_ROOT, kmsg_path: str = KMSG_PATH
) -> str | None:
    """Why real-kill tests cannot run here on cgroup v1, or None when they can."""
    if os.geteuid() == 0 and not (root / "memory.limit_in_bytes").is_file():
        return f"no cgroup v1 memory controller mounted at {root}"
    reason = _common_reason(root, kmsg_path)
    if reason is not None:
        return reason
    try:
        use_hierarchy = (root / "memory.use_hierarchy").read_text().strip()
    except OSError as exc:
        return f"cannot read {root}/memory.use_hierarchy: {exc}"
    if use_hierarchy != "1":
        return f"{root}/memory.use_hierarchy is {use_hierarchy}: pod-level limits would not count"
    return None


def memcg_v2_unavailable_reason(
    root: Path = CGROUP_V2_ROOT, kmsg_path: str = KMSG_PATH
) -> str | None:
    """Why real-kill tests cannot run here on cgroup v2, or None when they can."""
    try:
        controllers = (root / "cgroup.controllers").read_text().split()
    except OSError:
        return f"no cgroup v2 hierarchy mounted at {root}"
    if "memory" not in controllers:
        return f"the cgroup v2 hierarchy at {root} has no memory controller (it is on v1)"
    try:
        enabled = (root / "cgroup.subtree_control").read_text().split()
    except OSError as exc:
        return f"cannot read {root}/cgroup.subtree_control: {exc}"
    if "memory" not in enabled:
        return (
            f"memory is not enabled for children of {root} "
            f"(echo +memory > {root}/cgroup.subtree_control)"
        )
    return _common_reason(root, kmsg_path)


def lab_cgroup_version() -> Version | None:
    """The cgroup version the lab uses on this host: where the memory controller is."""
    if memcg_v1_unavailable_reason() is None:
        return 1
    if memcg_v2_unavailable_reason() is None:
        return 2
    return None


def lab_unavailable_reason() -> str | None:
    """Why the lab can make no scratch memcg here on either version, or None."""
    if lab_cgroup_version() is not None:
        return None
    return f"cgroup v1: {memcg_v1_unavailable_reason()}; cgroup v2: {memcg_v2_unavailable_reason()}"


def unavailable_reason(version: Version) -> str | None:
    if version == 1:
        return memcg_v1_unavailable_reason()
    return memcg_v2_unavailable_reason()


def default_mount(version: Version) -> Path:
    return MEMCG_V1_ROOT if version == 1 else CGROUP_V2_ROOT


class CgroupFiles:
    """The memory files of one cgroup directory, read and written as its version wants."""

    def __init__(self, version: Version) -> None:
        self.version = version

    def set_limit(self, path: Path, limit_bytes: int) -> None:
        """The memory limit, and no swap beyond it (with swap the kernel would swap, not kill).

        v1: memory.limit_in_bytes and memory.memsw.limit_in_bytes, which must stay >= the
        former, so the order of the writes depends on the direction of the change.
        v2: memory.max, and memory.swap.max 0 (swap is limited on its own there).
        """
        if self.version == 2:
            _write(path / "memory.max", str(limit_bytes))
            if (path / "memory.swap.max").exists():
                _write(path / "memory.swap.max", "0")
            return
        memory = path / "memory.limit_in_bytes"
        memsw = path / "memory.memsw.limit_in_bytes"
        if not memsw.exists():
            _write(memory, str(limit_bytes))
            return
        try:
            _write(memory, str(limit_bytes))
            _write(memsw, str(limit_bytes))
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            _write(memsw, str(limit_bytes))
            _write(memory, str(limit_bytes))

    def limit_bytes(self, path: Path) -> int | None:
        """The memory limit; None for none (v2 `max`)."""
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        text = (path / name).read_text().strip()
        return None if text == "max" else int(text)

    def usage_bytes(self, path: Path) -> int:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return int((path / name).read_text())

    def oom_kill_count(self, path: Path) -> int:
        """Processes the OOM killer killed in this cgroup (v2: and below it; v1 counts only
        where the victim lived, which for a leaf is the same)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return keyed_value((path / name).read_bytes(), b"oom_kill") or 0

    def enable_memory_for_children(self, path: Path) -> None:
        """v2: children get their own memory files only when the parent enables the
        controller for them (a cgroup that does may hold no processes itself)."""
        if self.version == 1:
            return
        if "memory" not in (path / "cgroup.subtree_control").read_text().split():
            _write(path / "cgroup.subtree_control", "+memory")
