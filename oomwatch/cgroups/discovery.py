"""Find the memory cgroups worth watching under a cgroup mount (v1 or v2), bounded.

Kubernetes cgroups are found below any `kubepods`/`kubepods.slice` directory (it may sit under
a prefix: nested containers, a scratch root).  Every level is kept (node, qos, pod,
container) because v2 counters are hierarchical: a pod's counters still show a kill after the
container's cgroup is gone.  Optionally any other memcg with a limit is kept too (level
`cgroup`), so a host without a cluster is covered.  The walk never goes below a container
cgroup and stops at fixed depth and count bounds: the tree is written by other programs.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from oomwatch.cgroup_identity import CgroupIdentity, identify
from oomwatch.cgroups.files import CgroupGone, parse_limit_bytes, read_once

KUBEPODS_NAMES = frozenset({"kubepods", "kubepods.slice"})
MAX_SEARCH_DEPTH = 8  # how deep below the mount a kubepods dir (or a limited memcg) may sit
MAX_KUBEPODS_DEPTH = 5  # node / qos / pod / container (+1 spare for odd layouts)
MAX_CGROUPS = 4096


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """A mounted cgroup hierarchy that has the memory controller."""

    mount_path: str
    version: Literal[1, 2]

    def fs_path(self, relpath: str) -> str | None:
        """The directory for a kernel-printed cgroup path, or None if it would leave the mount."""
        parts = [p for p in relpath.split("/") if p]
        if any(p in (".", "..") or "\0" in p for p in parts):
            return None
        return "/".join([self.mount_path.rstrip("/"), *parts]) if parts else self.mount_path


def locate(hierarchies: Collection[Hierarchy], relpath: str) -> tuple[str, int] | None:
    """The existing directory of a kernel-printed cgroup path and its hierarchy's version
    (None: in no mounted hierarchy, or gone)."""
    for hierarchy in hierarchies:
        path = hierarchy.fs_path(relpath)
        if path is not None and os.path.isdir(path):
            return path, hierarchy.version
    return None


@dataclass(frozen=True, slots=True)
class WatchedCgroup:
    """A memory cgroup under watch: its path as the kernel prints it and where it lives."""

    relpath: str
    fs_path: str
    version: Literal[1, 2]
    identity: CgroupIdentity


def find_hierarchies(root: str) -> list[Hierarchy]:
    """The memory hierarchies under a cgroup root such as `/sys/fs/cgroup` or `/host/sys/fs/cgroup`.

    v1: `<root>/memory` (or `<root>` itself when it is the memory mount); v2: `<root>` or
    `<root>/unified` when its `cgroup.controllers` lists `memory` (a hybrid host's unified
    mount usually does not).
    """
    found: list[Hierarchy] = []
    for candidate in (root, os.path.join(root, "unified")):
        if _has_memory_controller(candidate):
            found.append(Hierarchy(candidate.rstrip("/") or "/", 2))
            break
    for candidate in (os.path.join(root, "memory"), root):
        if os.path.exists(os.path.join(candidate, "memory.usage_in_bytes")):
            found.append(Hierarchy(candidate.rstrip("/") or "/", 1))
            break
    return found


def describe_memory_hierarchies(root: str) -> str:
    """One line for people: where the memory controller is under `root`, and which version
    (`./dev.sh run` says it before starting the agent)."""
    found = find_hierarchies(root)
    if not found:
        return f"no memory cgroup hierarchy under {root}"
    return "; ".join(f"cgroup v{h.version} (memory controller at {h.mount_path})" for h in found)


def _has_memory_controller(path: str) -> bool:
    try:
        return "memory" in read_once(os.path.join(path, "cgroup.controllers")).decode().split()
    except (CgroupGone, OSError, UnicodeDecodeError):
        return False


_Dir = tuple[str, str, int, int]  # fs dir, relpath, depth, depth below kubepods (-1: not)


def discover(
    hierarchy: Hierarchy,
    *,
    include_limited: bool = True,
    max_cgroups: int = MAX_CGROUPS,
    known: Mapping[str, WatchedCgroup] | None = None,
    under: str = "",
    notified: Collection[str] = (),
) -> tuple[list[WatchedCgroup], bool]:
    """Walk one hierarchy (or the subtree `under`, itself included); parents come first.

    Returns the cgroups and whether a bound cut the walk short.  Cgroups in `known` (by
    relpath) are taken as they are, without reading or identifying them again.  A known
    directory below `kubepods` in `notified` (inotify tells of every child made in it since
    its children were listed) is not listed again: its children are the known ones.
    """
    known = known or {}
    known_children: dict[str, list[WatchedCgroup]] = {}
    if notified:
        for cg in known.values():
            known_children.setdefault(cg.relpath.rpartition("/")[0], []).append(cg)
    out: list[WatchedCgroup] = []
    truncated = False
    # Depth-first with an explicit stack: (fs dir, relpath, depth, depth below kubepods or -1).
    stack: list[_Dir] = []
    parts = [p for p in under.split("/") if p]
    start = hierarchy.fs_path(under)
    if not parts:
        stack.append((hierarchy.mount_path, "", 0, -1))
    elif start is not None and os.path.isdir(start):
        kube = [i for i, p in enumerate(parts) if p in KUBEPODS_NAMES]
        rel, depth = "/" + "/".join(parts), len(parts)
        kube_depth = depth - 1 - kube[-1] if kube else -1
        if _beyond_bounds(depth, kube_depth):
            return out, True
        keep, descend = _visit(hierarchy, known, start, rel, kube_depth, include_limited)
        if keep is not None:
            out.append(keep)
        if descend:
            stack.append((start, rel, depth, kube_depth))
    while stack:
        fs_dir, rel, depth, kube_depth = stack.pop()
        if kube_depth >= 0 and rel in notified and rel in known:
            children = sorted(
                (
                    (cg.fs_path, cg.relpath, depth + 1, kube_depth + 1)
                    for cg in known_children.get(rel, ())
                ),
                reverse=True,
            )
        else:
            children = _children(fs_dir, rel, depth, kube_depth)
        for child in children:
            path, child_rel, child_depth, child_kube = child
            if _beyond_bounds(child_depth, child_kube):
                truncated = True
                continue
            keep, descend = _visit(hierarchy, known, path, child_rel, child_kube, include_limited)
            if keep is not None:
                if len(out) >= max_cgroups:
                    return out, True
                out.append(keep)
            if descend:
                stack.append(child)
    return out, truncated


def _children(fs_dir: str, rel: str, depth: int, kube_depth: int) -> list[_Dir]:
    """A directory's child cgroups, in the order the walk visits them (a stack: reversed);
    none if it was removed while we walked or is unreadable (not ours to fail on)."""
    children: list[_Dir] = []
    try:
        with os.scandir(fs_dir) as it:
            for entry in it:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                if kube_depth >= 0:
                    child_kube = kube_depth + 1
                else:
                    child_kube = 0 if entry.name in KUBEPODS_NAMES else -1
                children.append((entry.path, f"{rel}/{entry.name}", depth + 1, child_kube))
    except OSError:
        return []
    return sorted(children, reverse=True)


def _beyond_bounds(depth: int, kube_depth: int) -> bool:
    return kube_depth > MAX_KUBEPODS_DEPTH or (kube_depth < 0 and depth > MAX_SEARCH_DEPTH)


def _visit(
    hierarchy: Hierarchy,
    known: Mapping[str, WatchedCgroup],
    path: str,
    rel: str,
    kube_depth: int,
    include_limited: bool,
) -> tuple[WatchedCgroup | None, bool]:
    """Whether to watch this directory, and whether to look below it."""
    seen = known.get(rel)
    if seen is not None and seen.fs_path == path:
        return seen, seen.identity.level != "container"
    return _classify(hierarchy, path, rel, kube_depth, include_limited)


def _classify(
    hierarchy: Hierarchy, path: str, rel: str, kube_depth: int, include_limited: bool
) -> tuple[WatchedCgroup | None, bool]:
    """Whether to watch this directory, and whether to look below it."""
    if kube_depth >= 0:
        identity = identify(rel)
        watched = WatchedCgroup(rel, path, hierarchy.version, identity)
        # Below a container live only the runtime's own sub-cgroups (crun's `container`).
        return watched, identity.level != "container"
    if include_limited and _has_limit(hierarchy, path):
        return WatchedCgroup(rel, path, hierarchy.version, identify(rel)), True
    return None, True


def _has_limit(hierarchy: Hierarchy, path: str) -> bool:
    name = "memory.max" if hierarchy.version == 2 else "memory.limit_in_bytes"
    try:
        return parse_limit_bytes(read_once(os.path.join(path, name))) is not None
    except (CgroupGone, OSError):
        return False


def read_between_rescans(cg: WatchedCgroup) -> bool:
    """Whether the counters are read on change (or every poll), not only at full rescans.

    v1 counters are local and Kubernetes puts no process in the node, QoS or pod cgroups
    themselves, so those read 0 forever.  On v2 the node and QoS levels would wake us for
    every `max`/`high` event of every container on the node (and reading a parent means
    reading all below it); they matter only when a whole pod cgroup vanished before we read
    it, which the rescans' full reads still catch.
    """
    if cg.identity.level in ("container", "cgroup"):
        return True
    return cg.version == 2 and cg.identity.level == "pod"


def counter_file(cg: WatchedCgroup) -> str:
    return os.path.join(cg.fs_path, counter_file_name(cg))


def counter_file_name(cg: WatchedCgroup) -> str:
    """The file that holds a cgroup's OOM counters."""
    return "memory.events" if cg.version == 2 else "memory.oom_control"
