"""Scratch memcgs (cgroup v1 or v2) for provoking real kernel OOM kills safely.

Tests and the demo need real kills, which means real memcgs with small limits.  Everything
made here lives under one `oomwatch-lab-<pid>-<random>` directory of the hierarchy that holds
the memory controller (`hierarchy.lab_cgroup_version`), and cleanup kills only the
processes this object started (and their descendants), moves any other process it was given
back to the root cgroup, removes tmpfs leftovers and then the directories bottom-up -- also
when a test fails midway.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

import psutil

from oomwatch.lab.hierarchy import (
    KMSG_PATH,
    MEMCG_V1_ROOT,
    CgroupFiles,
    Version,
    default_mount,
    lab_cgroup_version,
    lab_unavailable_reason,
    memcg_v1_unavailable_reason,
    memcg_v2_unavailable_reason,
)

__all__ = ["KMSG_PATH", "Memcg", "ScratchMemcg", "memcg_v1_unavailable_reason"]

TMPFS_ROOT = Path("/dev/shm")
SCRATCH_PREFIX = "oomwatch-lab"
# <prefix>-<owner pid>-<8 hex>, and for tmpfs directories a -<serial> suffix.
_SCRATCH_NAME = re.compile(rf"{SCRATCH_PREFIX}-(?P<pid>\d+)-[0-9a-f]{{8}}(?:-\d+)?")
_STALE_AFTER_S = 60.0
_RMDIR_RETRY_S = 5.0
# The scratch root always has a limit, and a small one: the lab must never approach a
# node-wide OOM on a machine that others share.  256 MiB unless asked; up to 512 MiB for a
# workload that needs it (the pruning trainer holds ~280 MiB of torch before it leaks).
DEFAULT_SCRATCH_LIMIT_BYTES = 256 << 20
MAX_SCRATCH_LIMIT_BYTES = 512 << 20
# Real kills on one machine must not overlap: the kernel's report rate limit is node-wide and
# every kill reaches every reader of /dev/kmsg, so a second test run (another checkout, a
# bench) would see, and could be charged with, this run's kills.  One machine-wide lock,
# held while a scratch tree exists, serializes them.
LAB_LOCK_PATH = Path("/run/lock/oomwatch-lab.lock")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_scratch(mount: Path = MEMCG_V1_ROOT, tmpfs_root: Path = TMPFS_ROOT) -> list[Path]:
    """Remove scratch memcgs and tmpfs dirs whose owner died without cleaning up.

    A test run killed with SIGKILL cannot run its cleanup; its hogs die with it
    (PR_SET_PDEATHSIG) but the directories stay.  Only trees whose owning process is gone
    and that are older than a minute are touched; a memcg that still has tasks stays.
    """
    removed: list[Path] = []
    now = time.time()
    for base in (mount, tmpfs_root):
        if not base.is_dir():
            continue
        for entry in base.iterdir():
            match = _SCRATCH_NAME.fullmatch(entry.name)
            if match is None or _pid_alive(int(match["pid"])):
                continue
            with contextlib.suppress(OSError):
                if now - entry.stat().st_mtime < _STALE_AFTER_S:
                    continue
                if base == tmpfs_root:
                    shutil.rmtree(entry)
                else:
                    for directory, _, _ in sorted(os.walk(entry), key=lambda w: -len(w[0])):
                        os.rmdir(directory)
                removed.append(entry)
    return removed


class _LabLock:
    """The machine-wide lab lock (flock), re-entrant within one process."""

    def __init__(self, path: Path = LAB_LOCK_PATH) -> None:
        self.path = path
        self._fd: int | None = None
        self._depth = 0

    def acquire(self) -> None:
        if self._depth == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._fd = fd
        self._depth += 1

    def release(self) -> None:
        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


_LAB_LOCK = _LabLock()


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _flat_keyed(text: str) -> dict[str, int]:
    """A flat-keyed cgroup file (`name value` lines) as a dict."""
    fields = (line.split() for line in text.splitlines())
    return {parts[0]: int(parts[1]) for parts in fields if len(parts) == 2}


class Memcg:
    """One memcg directory of a scratch tree: its kernel path, its files, its children."""

    def __init__(self, scratch: ScratchMemcg, relpath: str) -> None:
        self.scratch = scratch
        self.relpath = relpath  # as the kernel prints it, e.g. /oomwatch-lab-1-ab/kubepods
        self.fs_path = scratch.mount / relpath.lstrip("/")

    def __repr__(self) -> str:
        return f"Memcg({self.relpath!r})"

    def create_child(self, name: str, limit_bytes: int | None = None) -> Memcg:
        """Make (or reuse) a child memcg; a limit is set when given."""
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"bad memcg name {name!r}")
        child = Memcg(self.scratch, f"{self.relpath}/{name}")
        self.scratch.files.enable_memory_for_children(self.fs_path)
        self.scratch._mkdir(child.fs_path)
        if limit_bytes is not None:
            child.set_limit(limit_bytes)
        return child

    def set_limit(self, limit_bytes: int) -> None:
        """Set the memory limit, with no swap beyond it (`CgroupFiles.set_limit`)."""
        if self is self.scratch and not 0 < limit_bytes <= MAX_SCRATCH_LIMIT_BYTES:
            raise ValueError(f"scratch root limit {limit_bytes} not in (0, 512 MiB]")
        self.scratch.files.set_limit(self.fs_path, limit_bytes)

    def limit_bytes(self) -> int | None:
        """The memory limit in bytes; None where v2 says `max`."""
        return self.scratch.files.limit_bytes(self.fs_path)

    def usage_bytes(self) -> int:
        return self.scratch.files.usage_bytes(self.fs_path)

    def add_pid(self, pid: int) -> None:
        """Move a process into this memcg (its later charges land here)."""
        _write(self.fs_path / "cgroup.procs", str(pid))
        self.scratch._note_added(pid)

    def pids(self) -> list[int]:
        """Processes directly in this memcg (not in its children)."""
        text = (self.fs_path / "cgroup.procs").read_text()
        return [int(line) for line in text.split()]

    def oom_control(self) -> dict[str, int]:
        """memory.oom_control as a dict: oom_kill_disable, under_oom, oom_kill."""
        return _flat_keyed((self.fs_path / "memory.oom_control").read_text())

    def oom_kill_count(self) -> int:
        """Kills the kernel counted in this memcg (`CgroupFiles.oom_kill_count`)."""
        return self.scratch.files.oom_kill_count(self.fs_path)

    def events(self, local: bool = False) -> dict[str, int]:
        """v2 memory.events (or memory.events.local) as a dict: oom, oom_kill, ..."""
        name = "memory.events.local" if local else "memory.events"
        return _flat_keyed((self.fs_path / name).read_text())

    def set_oom_group(self, enabled: bool = True) -> None:
        """v2 memory.oom.group: an OOM kill here kills every process of the cgroup."""
        if self.scratch.version != 2:
            raise ValueError("memory.oom.group exists only on cgroup v2")
        _write(self.fs_path / "memory.oom.group", "1" if enabled else "0")

    def stat(self) -> dict[str, int]:
        """memory.stat, names as the kernel writes them, values in bytes (or counts)."""
        out: dict[str, int] = {}
        for line in (self.fs_path / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            out[name] = int(value)
        return out


class ScratchMemcg(Memcg):
    """A scratch memcg tree under the memory root of v1 or v2; use as a context manager.

    The root's limit (256 MiB unless given, at most 512 MiB) bounds the whole tree; children
    may set smaller ones.  `version` None takes the hierarchy that holds the memory controller
    here.  `exclusive=False` skips the machine-wide lab lock, for workloads that must never be
    killed and run long (a soak): others' real kills may then run beside them, and the caller
    must read only its own cgroups' records.
    """

    def __init__(
        self,
        limit_bytes: int = DEFAULT_SCRATCH_LIMIT_BYTES,
        *,
        version: Version | None = None,
        mount: Path | None = None,
        prefix: str = SCRATCH_PREFIX,
        exclusive: bool = True,
    ) -> None:
        if not 0 < limit_bytes <= MAX_SCRATCH_LIMIT_BYTES:
            raise ValueError(f"scratch memcg limit {limit_bytes} not in (0, 512 MiB]")
        found = version or lab_cgroup_version()
        self.version: Version = found or 1
        self._none_here = found is None  # neither version can make scratch memcgs here
        self.files = CgroupFiles(self.version)
        self.mount = mount or default_mount(self.version)
        name = f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}"
        super().__init__(self, f"/{name}")
        self._limit_bytes = limit_bytes
        self._dirs: list[Path] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._added_pids: set[int] = set()
        self._tmp_paths: list[Path] = []
        self._created = False
        # False for a long run that provokes no kill and minds none of others' (a soak):
        # it must not hold every real-kill test on the machine back for its whole length
        self._exclusive = exclusive

    def __enter__(self) -> ScratchMemcg:
        try:
            self.create()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()

    def create(self) -> None:
        if self._created:
            return
        if self._none_here:
            reason = lab_unavailable_reason()
        elif self.version == 1:
            reason = memcg_v1_unavailable_reason(self.mount)
        else:
            reason = memcg_v2_unavailable_reason(self.mount)
        if reason is not None:
            raise RuntimeError(f"cannot make a scratch memcg: {reason}")
        if self._exclusive:
            _LAB_LOCK.acquire()
        try:
            remove_stale_scratch(self.mount)
            self._mkdir(self.fs_path)
        except BaseException:
            if self._exclusive:
                _LAB_LOCK.release()
            raise
        self._created = True
        self.set_limit(self._limit_bytes)

    # -- bookkeeping used by Memcg and spawn_hog -------------------------------------------
    def _mkdir(self, path: Path) -> None:
        if path.is_dir():
            return
        path.mkdir()
        self._dirs.append(path)

    def _note_added(self, pid: int) -> None:
        if all(proc.pid != pid for proc in self._procs):
            self._added_pids.add(pid)

    def track_process(self, proc: subprocess.Popen[bytes]) -> None:
        """Record a process this scratch tree started, so cleanup kills it."""
        self._procs.append(proc)
        self._added_pids.discard(proc.pid)

    def track_tmp_path(self, path: Path) -> None:
        """Record a tmpfs file or directory to remove at cleanup (shmem stays charged)."""
        self._tmp_paths.append(path)

    def memcgs(self) -> list[Memcg]:
        """Every memcg of the tree, the root first."""
        return [self] + [
            Memcg(self, "/" + str(path.relative_to(self.mount))) for path in self._dirs[1:]
        ]

    # -- cleanup ---------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Kill what we started, release what we were given, remove tmpfs files and dirs."""
        try:
            self._cleanup()
        finally:
            if self._created:
                self._created = False
                if self._exclusive:
                    _LAB_LOCK.release()

    def _cleanup(self) -> None:
        self._kill_started()
        self._release_added()
        for path in reversed(self._tmp_paths):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        self._tmp_paths.clear()
        errors: list[str] = []
        for path in reversed(self._dirs):
            error = _rmdir_patiently(path)
            if error:
                errors.append(error)
        self._dirs.clear()
        if errors:
            raise RuntimeError("scratch memcg cleanup left: " + "; ".join(errors))

    def _kill_started(self) -> None:
        victims: list[psutil.Process] = []
        for proc in self._procs:
            if proc.poll() is not None:
                continue
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(proc.pid)
                victims.extend(parent.children(recursive=True))
                victims.append(parent)
        for victim in victims:
            with contextlib.suppress(psutil.Error):
                victim.send_signal(signal.SIGKILL)
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_RMDIR_RETRY_S)
            for stream in (proc.stdout, proc.stderr, proc.stdin):
                if stream is not None:
                    stream.close()
        psutil.wait_procs(victims, timeout=_RMDIR_RETRY_S)
        self._procs.clear()

    def _release_added(self) -> None:
        root_procs = self.mount / "cgroup.procs"
        for pid in sorted(self._added_pids):
            with contextlib.suppress(ProcessLookupError, OSError):
                _write(root_procs, str(pid))
        self._added_pids.clear()


def _rmdir_patiently(path: Path) -> str | None:
    """rmdir, retrying while exiting tasks still hold the memcg (EBUSY)."""
    deadline = time.monotonic() + _RMDIR_RETRY_S
    while True:
        try:
            path.rmdir()
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return f"{path}: {exc.strerror}"
            time.sleep(0.05)
