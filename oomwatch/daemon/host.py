"""Small facts and settings of the host process: live pids of a cgroup, fd limit, signals,
whether a kill may go on to a group kill."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from collections.abc import Callable
from types import FrameType

from oomwatch.incident import Incident
from oomwatch.reconcile.attribution import covers

_PROCS_DEPTH = 3
_PF_EXITING = 0x4  # include/linux/sched.h; field 9 of /proc/<pid>/stat


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


def dying(pid: int, proc_root: str = "/proc") -> bool:
    """Whether a process is on its way out: a zombie, or already in exit (`PF_EXITING`).

    Killed namespace peers linger in `cgroup.procs` while they exit; they are no survivors.
    A pid we cannot see (0: another pid namespace) is not known to be dying.
    """
    if pid <= 0:
        return False
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[0] in (b"Z", b"X", b"x") or int(fields[6]) & _PF_EXITING != 0
    except (OSError, IndexError, ValueError):
        return True  # listed a moment ago, gone now


def install_signal_handlers(stop: Callable[[], None]) -> None:
    """SIGTERM and SIGINT stop the loop cleanly (the kubelet sends SIGTERM)."""

    def _handler(signum: int, _frame: FrameType | None) -> None:
        stop()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)


def may_kill_group(
    incident: Incident, oom_group: Callable[[str], bool | None], *, cgroup_v2: bool
) -> bool:
    """Whether the kernel may go on to kill the victim's whole group, so that the members'
    kill lines are still to come: `memory.oom.group` set at its cgroup or above it, up to the
    OOM's (mm/memcontrol.c mem_cgroup_get_oom_group); where the kernel withheld the report
    (no cgroup printed), on any cgroup v2 node."""
    cgroup = incident.task_memcg
    if cgroup is None:
        return cgroup_v2
    top = incident.oom_memcg or "/"
    while True:
        if oom_group(cgroup):
            return True
        if cgroup in ("", "/", top) or not covers(top, cgroup):
            return False
        cgroup = cgroup.rsplit("/", 1)[0] or "/"
