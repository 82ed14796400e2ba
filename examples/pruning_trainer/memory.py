"""The memory a container limit must hold for a trainer run, by phase: what sizes the pods.

    python -m examples.pruning_trainer.memory --seconds 75 -- --dataset synthetic \\
        --synthetic-examples 200000 --features 512 --workers 4 --shm --batch-size 8192 \\
        --score-runs 1 --score-epochs 2 --score-only

Runs the trainer with the probe, samples /proc five times a second until it exits or the
time is up, and prints per phase the peak of what the kernel cannot reclaim: the trainer's
anonymous memory and shmem plus its DataLoader workers' Private_Dirty (copied-on-write and
own pages, shared memory they alone map).  Page cache is left out: the kernel reclaims it
before it kills.  The phase is the trainer's own, read from its flight record.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from oomwatch.probe.reader import ProbeDirReader
from oomwatch.probe.sampler import parse_kb_fields

REPO = Path(__file__).resolve().parents[2]
_MAIN = {"RssAnon": "anon", "RssShmem": "shmem"}
_WORKER = {"Private_Dirty": "private_dirty"}


def _kb_fields(path: str, wanted: dict[str, str]) -> dict[str, int]:
    try:
        with open(path) as handle:
            return parse_kb_fields(handle.read(), wanted)
    except OSError:  # the process is gone
        return {}


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def _phase(reader: ProbeDirReader) -> str:
    records = reader.read_all()
    samples = records[0].samples if records else ()
    return (samples[-1].phase or "?") if samples else "start"


def measure(trainer_args: Sequence[str], seconds: float, probe_dir: Path) -> dict[str, list[int]]:
    """Per phase: [total, trainer anon, trainer shmem, workers' private dirty] bytes at the
    sample where the total peaked."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.pruning_trainer",
            *trainer_args,
            "--probe-dir",
            str(probe_dir),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    reader = ProbeDirReader(probe_dir)
    peaks: dict[str, list[int]] = {}
    deadline = time.monotonic() + seconds
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            main = _kb_fields(f"/proc/{proc.pid}/status", _MAIN)
            workers = sum(
                _kb_fields(f"/proc/{pid}/smaps_rollup", _WORKER).get("private_dirty", 0)
                for pid in _children(proc.pid)
            )
            row = [main.get("anon", 0), main.get("shmem", 0), workers]
            phase = _phase(reader)
            if sum(row) > peaks.get(phase, [0])[0]:
                peaks[phase] = [sum(row), *row]
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
        reader.close()
    return peaks


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.pruning_trainer.memory")
    p.add_argument("--seconds", type=float, default=60.0, help="stop the trainer after this")
    p.add_argument("--probe-dir", default=None, help="keep the flight record here")
    p.add_argument("trainer", nargs=argparse.REMAINDER, help="-- then the trainer's arguments")
    args = p.parse_args(argv)
    trainer = args.trainer[1:] if args.trainer[:1] == ["--"] else args.trainer
    with tempfile.TemporaryDirectory() as scratch:
        peaks = measure(trainer, args.seconds, Path(args.probe_dir or scratch))
    for phase, (total, anon, shmem, workers) in peaks.items():
        print(
            f"{phase:<14} {total >> 20:>6} MiB = trainer anon {anon >> 20} + shmem "
            f"{shmem >> 20} + workers' private dirty {workers >> 20}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
