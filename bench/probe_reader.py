"""What one walk of the probe directory costs the daemon: N full flight records, each changed
since the last walk (so none comes from the parse cache), read and validated.

    .venv/bin/python bench/probe_reader.py --files 200 --rounds 5

Sizes the reader's per-walk deadline (`ReaderLimits.max_walk_s`).  Two hostile directories
instead, with the daemon's default limits (the tests count these walks' work; the seconds are
here):

    .venv/bin/python bench/probe_reader.py --crowded-pod-dirs 10 --rounds 5
    .venv/bin/python bench/probe_reader.py --junk 6500 --rounds 5

`--crowded-pod-dirs N`: N pod directories of 20,000 entries each beside one real record: the
seconds of one walk.  `--junk N`: N junk entries (a fifth of them named like flight records)
beside one real record: the walks until it is read and the slowest of them.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

from oomwatch.probe.reader import ProbeDirReader, ReaderLimits
from oomwatch.probe.ring import SAMPLE_SLOTS, RingWriter
from oomwatch.probe.schema import ProbeMeta, ProbeSample, to_payload


def _fill(directory: Path, files: int, round_no: int) -> None:
    for i in range(files):
        meta = ProbeMeta(
            pid=1000 + i,
            comm="python3",
            started_wall_s=time.time(),
            started_mono_s=time.monotonic(),
            cgroup=f"/kubepods/pod{i}/c{i}",
            pod_uid=f"pod{i}",
            container="trainer",
        )
        writer = RingWriter(str(directory / f"pod{i}.trainer.ring"), to_payload(meta))
        for seq in range(SAMPLE_SLOTS):  # every slot written: the largest file there is
            writer.write_sample(
                to_payload(
                    ProbeSample(
                        wall_s=time.time(),
                        mono_s=time.monotonic(),
                        rss_bytes=(500 + seq) << 20,
                        uss_bytes=480 << 20,
                        anon_bytes=400 << 20,
                        shmem_bytes=round_no << 20,
                        phase="grand_scoring",
                        epoch=round_no,
                        step=seq,
                        batch_size=256,
                        cuda={
                            "device": "cuda:0",
                            "allocated_bytes": 1 << 30,
                            "reserved_bytes": 2 << 30,
                        },
                    )
                )
            )
        writer.close()


def _crowded(directory: Path, pod_dirs: int) -> None:
    for d in range(pod_dirs):
        junk = directory / f"junk{d}"  # hard links: no space needed; 65,000 an inode (ext4)
        junk.write_bytes(b"x")
        pod = directory / f"1b2c0000-{d:04d}"
        pod.mkdir()
        for i in range(20_000):
            os.link(junk, pod / f"j{i}")
    (directory / "1b2c0000-9999").mkdir()
    _fill(directory / "1b2c0000-9999", 1, 0)


def _junk(directory: Path, entries: int) -> None:
    _fill(directory, 1, 0)
    for i in range(entries):
        name = f"junk-{i}.ring" if i % 5 == 0 else f"junk-{i}"
        (directory / name).write_bytes(b"x" if i % 5 == 0 else b"")


def _hostile(args: argparse.Namespace) -> None:
    logging.disable(logging.WARNING)  # the refusal lines are the tests'; the seconds are here
    walk_s: list[float] = []
    walks_needed: list[int] = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch)
            if args.crowded_pod_dirs:
                _crowded(directory, args.crowded_pod_dirs)
            else:
                _junk(directory, args.junk)
            reader = ProbeDirReader(directory)  # the daemon's limits and clock
            for walk in range(1, 21):
                started = time.perf_counter()
                records = reader.read_all()
                walk_s.append(time.perf_counter() - started)
                if any(r.name.endswith("pod0.trainer.ring") for r in records):
                    walks_needed.append(walk)
                    break
            reader.close()
    walk_s.sort()
    shape = (
        f"{args.crowded_pod_dirs} pod directories of 20,000 entries"
        if args.crowded_pod_dirs
        else f"{args.junk} junk entries"
    )
    print(
        f"{shape}: real record read on walk {sorted(walks_needed)} of {args.rounds} rounds; "
        f"walk median {1000 * walk_s[len(walk_s) // 2]:.1f} ms, slowest {1000 * walk_s[-1]:.1f} ms"
        f" ({len(walk_s)} walks)"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--crowded-pod-dirs", type=int, default=0)
    p.add_argument("--junk", type=int, default=0)
    args = p.parse_args()
    if args.crowded_pod_dirs or args.junk:
        _hostile(args)
        return
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        reader = ProbeDirReader(directory, ReaderLimits(max_walk_s=3600.0))
        per_file_ms: list[float] = []
        for round_no in range(args.rounds):
            _fill(directory, args.files, round_no)  # every file new: nothing cached
            started = time.perf_counter()
            records = reader.read_all()
            elapsed = time.perf_counter() - started
            assert len(records) == args.files
            per_file_ms.append(elapsed * 1000 / args.files)
        per_file_ms.sort()
        median = per_file_ms[len(per_file_ms) // 2]
        spread = f"{per_file_ms[0]:.2f}-{per_file_ms[-1]:.2f}"
        print(
            f"{args.files} files x {SAMPLE_SLOTS} samples: {median:.2f} ms a file "
            f"(median of {args.rounds} walks; range {spread})"
        )


if __name__ == "__main__":
    main()
