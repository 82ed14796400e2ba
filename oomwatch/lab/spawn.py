"""Start `hog` workloads inside scratch memcgs and follow what they report."""

from __future__ import annotations

import errno
import itertools
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from oomwatch.lab import hog as hog_module
from oomwatch.lab.hog import MODES
from oomwatch.lab.memcg import TMPFS_ROOT, Memcg

_tmpfs_serial = itertools.count()
CACHE_ROOT = Path("/var/tmp")


class HogProcess(subprocess.Popen[bytes]):
    """A running hog: a Popen that also knows its memcg, comm and status lines."""

    def __init__(
        self,
        args: list[str],
        memcg: Memcg,
        comm: str,
        mode: str,
        tmpfs_dir: Path | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(args, **kwargs)
        self.memcg = memcg
        self.comm = comm
        self.mode = mode
        self.tmpfs_dir = tmpfs_dir
        self.lines: list[str] = []
        self._buffer = b""

    @property
    def child_pids(self) -> list[int]:
        """Pids of the allocating children in child-worker mode, as announced so far."""
        return [int(line.split()[1]) for line in self.lines if line.startswith("child ")]

    def wait_for(self, prefix: str, timeout_s: float = 10.0) -> str | None:
        """Wait for a status line starting with `prefix`; None if the hog ended first.

        Raises TimeoutError when neither happens in time.
        """
        found = self.wait_for_count(prefix, 1, timeout_s)
        return found[0] if found else None

    def wait_for_count(self, prefix: str, count: int, timeout_s: float = 10.0) -> list[str]:
        """Wait for `count` status lines starting with `prefix`; fewer if the hog ended."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [line for line in self.lines if line.startswith(prefix)]
            if len(found) >= count:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"hog {self.pid} ({self.mode}) said {len(found)} of "
                    f"{count} {prefix!r} in {timeout_s} s; said {self.lines}"
                )
            if not self._read_more(remaining):
                return found

    def _read_more(self, timeout_s: float) -> bool:
        """Read what stdout has; False at end of file (the hog is gone)."""
        assert self.stdout is not None
        fd = self.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], min(timeout_s, 0.5))
        if not ready:
            return True
        chunk = os.read(fd, 4096)
        if not chunk:
            return False
        self._buffer += chunk
        *complete, self._buffer = self._buffer.split(b"\n")
        self.lines.extend(line.decode(errors="replace") for line in complete)
        return True

    def stderr_text(self) -> str:
        """What the hog wrote to stderr (after it ended), for failure messages."""
        if self.stderr is None or self.poll() is None:
            return ""
        return self.stderr.read().decode(errors="replace")


def release_gate(fifo: Path, timeout_s: float = 10.0) -> None:
    """Let the hog held at its own FIFO gate (`os.mkfifo`, `start_gate=`) go on now.

    The hog waits in `open()` for a writer; a non-blocking open for writing fails with
    ENXIO until a reader is there (fifo(7)), so a hog that never came is a TimeoutError,
    not a test hung for ever."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            return
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                raise TimeoutError(f"no hog waits at gate {fifo}") from exc
        time.sleep(0.001)


def spawn_hog(
    memcg: Memcg,
    mode: str = "anon",
    mb: int = 0,
    comm: str = "oomlab-hog",
    oom_score_adj: int | None = None,
    step_mb: int = 16,
    step_interval_s: float = 0.0,
    *,
    reserve_mb: int = 0,
    parent_comm: str = "oomlab-parent",
    linger_s: float = 2.0,
    children: int = 1,
    together: bool = False,
    join_timeout_s: float = 10.0,
    start_gate: Path | None = None,
    prefill_mb: int = 0,
    cycle_mb: int = 0,
    rise_s: float = 0.0,
    hold_s: float = 0.0,
    rest_s: float = 1.0,
) -> HogProcess:
    """Start a hog in `memcg`; returns once it has joined the memcg (before it allocates).

    Several hogs may share one memcg (e.g. with different `oom_score_adj`): call this again.
    The scratch tree that owns `memcg` kills the hog (and its children) at cleanup.
    """
    if mode not in MODES:
        raise ValueError(f"unknown hog mode {mode!r}; one of {', '.join(MODES)}")
    scratch = memcg.scratch
    tmpfs_dir = None
    argv = [
        sys.executable,
        str(Path(hog_module.__file__)),
        "--cgroup-procs",
        str(memcg.fs_path / "cgroup.procs"),
        "--mode",
        mode,
        "--mb",
        str(mb),
        "--comm",
        comm,
        "--parent-comm",
        parent_comm,
        "--step-mb",
        str(step_mb),
        "--step-interval-s",
        str(step_interval_s),
        "--reserve-mb",
        str(reserve_mb),
        "--linger-s",
        str(linger_s),
        "--children",
        str(children),
        *(["--together"] if together else []),
    ]
    if oom_score_adj is not None:
        argv += ["--oom-score-adj", str(oom_score_adj)]
    if start_gate is not None:  # the caller waits for "ready", then creates the file
        argv += ["--start-gate", str(start_gate), "--prefill-mb", str(prefill_mb)]
    if mode in ("sawtooth", "cache"):
        argv += [
            "--cycle-mb",
            str(cycle_mb),
            "--rise-s",
            str(rise_s),
            "--hold-s",
            str(hold_s),
            "--rest-s",
            str(rest_s),
        ]
    if mode == "tmpfs":
        tmpfs_dir = TMPFS_ROOT / f"{scratch.relpath.strip('/')}-{next(_tmpfs_serial)}"
        scratch.track_tmp_path(tmpfs_dir)
        argv += ["--tmpfs-dir", str(tmpfs_dir)]
    if mode == "cache":  # on disk: page cache the kernel can reclaim (tmpfs would be shmem)
        cache_dir = CACHE_ROOT / f"{scratch.relpath.strip('/')}-{next(_tmpfs_serial)}"
        scratch.track_tmp_path(cache_dir)
        argv += ["--cache-dir", str(cache_dir)]
    hog = HogProcess(
        argv,
        memcg,
        comm,
        mode,
        tmpfs_dir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    scratch.track_process(hog)
    if hog.wait_for("joined", join_timeout_s) is None:
        hog.wait()
        raise RuntimeError(f"hog did not join {memcg.relpath}: {hog.stderr_text().strip()}")
    return hog
