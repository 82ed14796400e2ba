"""The lab workload: joins a memcg, names itself, then allocates memory the way a mode says.

Run as `python oomwatch/lab/hog.py --cgroup-procs /sys/fs/cgroup/memory/<x>/cgroup.procs ...`.
It moves itself into the memcg before allocating anything, sets its comm (the kernel prints
comm, not argv) and its oom_score_adj, and reports progress as lines on stdout:
`joined <pid>`, `allocated <mib>` and `holding` when it got everything it asked for without
being killed; in child-worker mode `child <pid>` and `child-exit <wait status>` per child
(a child that was not killed exits at once).  Two modes run until stopped, for the shapes a
pre-OOM forecast must not mistake for a leak (a leak itself is `anon` with a step interval:
1 MiB steps for a linear one, larger and slower ones for steps):
`sawtooth` holds `--mb` and, again and again, allocates `--cycle-mb` over `--rise-s`, holds
it `--hold-s`, frees it and rests `--rest-s` (a garbage collector's sawtooth; a one-off
spike with a long rest); `cache` holds `--mb` and reads a `--cycle-mb` file under
`--cache-dir` over and over, `--rest-s` between passes, so page cache fills the limit and
the kernel reclaims it (a steady workload near its limit).
It dies with its parent (PR_SET_PDEATHSIG) so a crashed test leaves no hog behind.  Only the
standard library is used, so it starts fast (bursts) and runs by path or as a module.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import mmap
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

MODES = ("anon", "thp", "tmpfs", "untouched-mapping", "child-worker", "idle", "sawtooth", "cache")
MIB = 1 << 20
PAGE_BYTES = mmap.PAGESIZE
HUGE_PAGE_BYTES = 2 * MIB
_MAP_NORESERVE = 0x4000  # <asm-generic/mman-common.h>; Python's mmap module lacks it
_PR_SET_PDEATHSIG = 1
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_unavailable_reason(enabled: Path = THP_ENABLED) -> str | None:
    """Why the `thp` mode gets no huge pages here, or None when it does (`always` or
    `madvise`: the mode asks with MADV_HUGEPAGE)."""
    if not enabled.exists():
        return "no transparent hugepage support in this kernel"
    if "[never]" in enabled.read_text():
        return "transparent hugepages are disabled ([never])"
    return None


def _say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _set_comm(comm: str) -> None:
    with open("/proc/self/comm", "wb") as handle:
        handle.write(comm.encode()[:15])


def _set_oom_score_adj(adj: int) -> None:
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write(str(adj))
    except PermissionError as exc:
        raise SystemExit(
            f"hog: cannot set oom_score_adj {adj} (lowering it below the "
            f"inherited minimum needs CAP_SYS_RESOURCE): {exc}"
        ) from exc


def _join(cgroup_procs: str) -> None:
    with open(cgroup_procs, "w") as handle:
        handle.write(str(os.getpid()))


def _touch_in_steps(region: mmap.mmap | memoryview, step_bytes: int, interval_s: float) -> None:
    """Fault in every page of `region`, `step_bytes` at a time, pausing between steps."""
    view = memoryview(region)
    for start in range(0, len(region), step_bytes):
        chunk = view[start : start + step_bytes]
        chunk[::PAGE_BYTES] = b"\x01" * len(range(0, len(chunk), PAGE_BYTES))
        if interval_s > 0:
            time.sleep(interval_s)


def _allocate_anon(
    mib: int, step_mib: int, interval_s: float, huge: bool, gate: Gate | None = None
) -> mmap.mmap | None:
    """Touch `mib` MiB; with a gate, the first `gate.prefill_mib` before waiting on it."""
    if mib <= 0:
        return None
    size = mib * MIB
    if huge:
        size = -(-size // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        region.madvise(mmap.MADV_HUGEPAGE)
    step_bytes = max(step_mib, 1) * MIB
    if gate is None:
        _touch_in_steps(region, step_bytes, interval_s)
        return region
    prefill = min(gate.prefill_mib * MIB, size)
    view = memoryview(region)
    _touch_in_steps(view[:prefill], step_bytes, interval_s)
    gate.wait()
    _touch_in_steps(view[prefill:], step_bytes, interval_s)
    return region


class Gate:
    """Hold at a barrier: many hogs prefill, say `ready`, then go on together when the test
    creates the gate file (their OOMs then fall within milliseconds of each other).

    A gate that is a FIFO is one hog's own: it waits in `open()` until the test opens the
    FIFO to write (`release_gate`), without polling -- hogs held for seconds on an emulated
    CPU would otherwise spend it waking every half millisecond."""

    def __init__(self, path: Path, prefill_mib: int) -> None:
        self.path = path
        self.prefill_mib = prefill_mib

    def wait(self) -> None:
        _say("ready")
        if self.path.is_fifo():
            with open(self.path, "rb"):
                return
        while not self.path.exists():
            time.sleep(0.0005)


def _fill_tmpfs(directory: Path, mib: int, step_mib: int, interval_s: float) -> None:
    """Write `mib` MiB of files under a tmpfs directory: shmem charged to the memcg."""
    directory.mkdir(parents=True, exist_ok=True)
    block = b"\x01" * MIB
    written = 0
    part = 0
    while written < mib:
        count = min(max(step_mib, 1), mib - written)
        with open(directory / f"part-{part}", "wb") as handle:
            for _ in range(count):
                handle.write(block)
        written += count
        part += 1
        if interval_s > 0:
            time.sleep(interval_s)


def _remove_on_sigterm(directory: Path) -> None:
    """Shmem stays charged after we die until the files go: remove them when told to stop."""

    def _stop(_signum: int, _frame: object) -> None:
        shutil.rmtree(directory, ignore_errors=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, _stop)


def _sawtooth(cycle_mib: int, rise_s: float, hold_s: float, rest_s: float) -> None:
    """Allocate, hold, free, rest, for ever."""
    steps = max(1, cycle_mib)
    while True:
        _say("cycle")
        region = _allocate_anon(cycle_mib, 1, rise_s / steps, huge=False)
        time.sleep(hold_s)
        if region is not None:
            region.close()
        time.sleep(rest_s)


def _read_cache(directory: Path, mib: int, rest_s: float) -> None:
    """Write one `mib` file, then read it again and again: page cache up to the limit."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "cache.bin"
    block = os.urandom(MIB)
    with open(path, "wb") as handle:
        for _ in range(mib):
            handle.write(block)
    _say("cache-written")
    while True:
        with open(path, "rb", buffering=0) as handle:
            while handle.read(MIB):
                pass
        time.sleep(rest_s)


def _hold() -> None:
    _say("holding")
    while True:
        signal.pause()


def _run_child_worker(args: argparse.Namespace) -> int:
    """Parent stays small; forked children (own comm) allocate, one after the other.

    Each child is expected to be killed; the parent waits for it before forking the next,
    so `--children 15` gives a fast, deterministic burst of kills from one small survivor.
    With `--together` all children are forked first and allocate at once: on an emulated,
    loaded CPU one after the other took longer than the kernel's 5 s rate-limit window.
    """
    living: list[int] = []

    def _stop(_signum: int, _frame: object) -> None:
        for pid in living:
            with contextlib.suppress(OSError):  # reaped meanwhile
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        sys.exit(0)

    signal.signal(signal.SIGTERM, _stop)
    for _ in range(args.children):
        pid = os.fork()
        if pid == 0:
            _die_with_parent()
            _set_comm(args.comm)
            if args.together:  # the killer must pick a child, never the parent they share
                with open("/proc/self/oom_score_adj", "w") as handle:
                    handle.write("1000")
            _allocate_anon(args.mb, args.step_mb, args.step_interval_s, huge=False)
            _say(f"allocated {args.mb}")
            os._exit(0)
        living.append(pid)
        _say(f"child {pid}")
        if not args.together:
            _reap(living)
    while living:
        _reap(living)
    time.sleep(args.linger_s)
    return 0


def _reap(living: list[int]) -> None:
    pid, status = os.wait()
    if pid in living:
        living.remove(pid)
    _say(f"child-exit {status}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hog.py", description=__doc__)
    parser.add_argument("--cgroup-procs", required=True, help="cgroup.procs file to join")
    parser.add_argument("--mode", choices=MODES, default="anon")
    parser.add_argument("--mb", type=int, default=0, help="MiB to allocate")
    parser.add_argument("--comm", default="oomlab-hog", help="comm (<= 15 bytes)")
    parser.add_argument("--parent-comm", default="oomlab-parent", help="child-worker parent")
    parser.add_argument("--oom-score-adj", type=int, default=None)
    parser.add_argument("--step-mb", type=int, default=16)
    parser.add_argument("--step-interval-s", type=float, default=0.0)
    parser.add_argument("--tmpfs-dir", type=Path, default=None, help="tmpfs mode: where")
    parser.add_argument("--reserve-mb", type=int, default=0, help="untouched mapping size")
    parser.add_argument("--children", type=int, default=1, help="child-worker: how many")
    parser.add_argument("--linger-s", type=float, default=2.0, help="child-worker parent")
    parser.add_argument("--together", action="store_true", help="child-worker: fork all first")
    parser.add_argument(
        "--start-gate",
        type=Path,
        default=None,
        help="anon: after --prefill-mb, wait until this file exists",
    )
    parser.add_argument("--prefill-mb", type=int, default=0, help="anon: MiB before the gate")
    parser.add_argument("--cycle-mb", type=int, default=0, help="sawtooth, cache: MiB a cycle")
    parser.add_argument("--rise-s", type=float, default=0.0, help="sawtooth: allocation time")
    parser.add_argument("--hold-s", type=float, default=0.0, help="sawtooth: held this long")
    parser.add_argument("--rest-s", type=float, default=1.0, help="sawtooth, cache: pause")
    parser.add_argument("--cache-dir", type=Path, default=None, help="cache: a disk directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _die_with_parent()
    _join(args.cgroup_procs)
    _set_comm(args.parent_comm if args.mode == "child-worker" else args.comm)
    if args.oom_score_adj is not None:
        _set_oom_score_adj(args.oom_score_adj)
    _say(f"joined {os.getpid()}")
    if args.mode == "child-worker":
        return _run_child_worker(args)
    keep: list[object] = []
    if args.mode == "untouched-mapping":
        keep.append(
            mmap.mmap(
                -1,
                args.reserve_mb * MIB,
                flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE,
            )
        )
    if args.mode in ("sawtooth", "cache"):
        keep.append(_allocate_anon(args.mb, args.step_mb, args.step_interval_s, huge=False))
        _say(f"allocated {args.mb}")
        if args.mode == "sawtooth":
            _sawtooth(args.cycle_mb, args.rise_s, args.hold_s, args.rest_s)
        if args.cache_dir is None:
            raise SystemExit("hog: --mode cache needs --cache-dir")
        _remove_on_sigterm(args.cache_dir)
        _read_cache(args.cache_dir, args.cycle_mb, args.rest_s)
    if args.mode == "tmpfs":
        if args.tmpfs_dir is None:
            raise SystemExit("hog: --mode tmpfs needs --tmpfs-dir")
        _remove_on_sigterm(args.tmpfs_dir)
        _fill_tmpfs(args.tmpfs_dir, args.mb, args.step_mb, args.step_interval_s)
    else:
        gate = None if args.start_gate is None else Gate(args.start_gate, args.prefill_mb)
        keep.append(
            _allocate_anon(
                args.mb, args.step_mb, args.step_interval_s, huge=args.mode == "thp", gate=gate
            )
        )
    _say(f"allocated {args.mb}")
    _hold()
    return 0


if __name__ == "__main__":
    sys.exit(main())
