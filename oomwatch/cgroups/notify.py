"""inotify on cgroups: v2 counter files that changed, and directories made or removed.

The watcher decides what a notification means; this keeps the watch descriptors.  v2
`memory.events` raises IN_MODIFY on change, and the file's IN_IGNORED says the cgroup is gone.
New and removed cgroups show as IN_CREATE/IN_DELETE on their parent's directory.  Without
inotify (disabled, or it could not be set up) nothing is watched and the watcher polls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from oomwatch.cgroups.discovery import Hierarchy, WatchedCgroup, counter_file
from oomwatch.cgroups.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_IGNORED,
    IN_ISDIR,
    IN_MODIFY,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    Inotify,
)

_DIR_EVENTS = IN_CREATE | IN_DELETE | IN_ONLYDIR


@dataclass
class Drained:
    """What the notifications since the last drain said."""

    changed: set[str] = field(default_factory=set)  # counters to read (the gone ones too)
    gone: set[str] = field(default_factory=set)  # counter files the kernel dropped
    made: set[tuple[Hierarchy, str]] = field(default_factory=set)  # new directories to walk
    removed: set[str] = field(default_factory=set)  # directories removed (maybe not watched)
    overflow: bool = False  # events were lost: only a full walk is sure


class CgroupNotifier:
    """The watch descriptors of counter files and cgroup directories."""

    def __init__(self, enabled: bool, warn: Callable[[str], None]) -> None:
        self._inotify: Inotify | None = Inotify() if enabled else None
        self._warn = warn
        self._wd_to_rel: dict[int, str] = {}  # memory.events watches
        self._rel_to_wd: dict[str, int] = {}
        self._dir_wds: dict[int, tuple[Hierarchy, str]] = {}  # directory watches

    @property
    def enabled(self) -> bool:
        return self._inotify is not None

    def fileno(self) -> int | None:
        return None if self._inotify is None else self._inotify.fileno()

    @property
    def counters(self) -> Collection[str]:
        """The cgroups whose counter file is watched."""
        return self._rel_to_wd.keys()

    @property
    def directories(self) -> int:
        """How many directories are watched."""
        return len(self._dir_wds)

    def watched_dirs(self, hierarchy: Hierarchy) -> set[str]:
        """The directories of `hierarchy` whose new children inotify tells of."""
        return {rel for h, rel in self._dir_wds.values() if h == hierarchy}

    def watch_counters(self, cg: WatchedCgroup) -> bool:
        """Watch a v2 counter file; False: poll it (v1, no inotify, or the watch failed)."""
        if self._inotify is None or cg.version != 2:
            return False
        try:
            wd = self._inotify.add_watch(counter_file(cg), IN_MODIFY)
        except OSError as exc:  # ENOSPC (watch limit) or the cgroup just went away
            self._warn(f"inotify watch on {cg.relpath!r} failed ({exc.strerror}); polling it")
            return False
        self._wd_to_rel[wd] = cg.relpath
        self._rel_to_wd[cg.relpath] = wd
        return True

    def watch_dir(self, hierarchy: Hierarchy, relpath: str) -> None:
        path = hierarchy.fs_path(relpath)
        if self._inotify is None or path is None:
            return
        try:
            wd = self._inotify.add_watch(path, _DIR_EVENTS)
        except OSError as exc:
            self._warn(f"inotify watch on directory {relpath!r} failed ({exc.strerror})")
            return
        self._dir_wds[wd] = (hierarchy, relpath)

    def drain(self) -> Drained:
        out = Drained()
        if self._inotify is None:
            return out
        for event in self._inotify.read():
            if event.mask & IN_Q_OVERFLOW:
                out.overflow = True
                continue
            rel = self._wd_to_rel.get(event.wd)
            if rel is not None:
                out.changed.add(rel)
                if event.mask & IN_IGNORED:  # the file (and so the cgroup) went away
                    self._forget_counters(rel)
                    out.gone.add(rel)
                continue
            watched_dir = self._dir_wds.get(event.wd)
            if watched_dir is None or not event.mask & (IN_ISDIR | IN_IGNORED):
                continue
            if event.mask & IN_IGNORED:
                del self._dir_wds[event.wd]
                continue
            hierarchy, parent = watched_dir
            child = f"{parent}/{event.name}"
            if event.mask & IN_CREATE:
                out.made.add((hierarchy, child))
            elif event.mask & IN_DELETE:
                out.removed.add(child)
        return out

    def forget(self, relpath: str) -> None:
        """Stop watching a cgroup's counter file and directory."""
        wd = self._rel_to_wd.get(relpath)
        self._forget_counters(relpath)
        if wd is not None and self._inotify is not None:
            with contextlib.suppress(OSError):  # the kernel already dropped it with the file
                self._inotify.rm_watch(wd)
        for dir_wd, (_, dir_rel) in list(self._dir_wds.items()):
            if dir_rel == relpath:
                del self._dir_wds[dir_wd]
                if self._inotify is not None:
                    with contextlib.suppress(OSError):
                        self._inotify.rm_watch(dir_wd)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    def _forget_counters(self, relpath: str) -> None:
        wd = self._rel_to_wd.pop(relpath, None)
        if wd is not None:
            self._wd_to_rel.pop(wd, None)
