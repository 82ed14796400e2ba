"""What one walk of the probe directory costs the daemon: N full flight records, each changed
since the last walk (so none comes from the parse cache), read and validated.

    .venv/bin/python bench/probe_reader.py --files 200 --rounds 5

Sizes the reader's per-walk deadline (`ReaderLimits.max_walk_s`).
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
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
