"""Small facts and settings of the host process: live pids of a cgroup, fd limit, signals."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from collections.abc import Callable
from types import FrameType

_PROCS_DEPTH = 3


def raise_open_files_limit() -> None:
    """The watcher keeps a file open per watched cgroup: lift the soft fd limit to the hard."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def live_pids(fs_path: str, depth: int = _PROCS_DEPTH) -> set[int] | None:
    """Pids in a cgroup directory and its sub-cgroups (bounded); None if the cgroup is gone."""
    try:
        with open(os.path.join(fs_path, "cgroup.procs"), "rb") as fh:
            pids = {int(tok) for tok in fh.read().split() if tok.isdigit()}
    except OSError:
        return None
    if depth > 0:
        with contextlib.suppress(OSError), os.scandir(fs_path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pids |= live_pids(entry.path, depth - 1) or set()
    return pids


def install_signal_handlers(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT stop the loop cleanly (the kubelet sends SIGTERM)."""

    def _handler(signum: int, _frame: FrameType | None) -> None:
        stop()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)

