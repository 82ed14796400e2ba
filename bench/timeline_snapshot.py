"""What the cgroup worker's timeline snapshot costs per pass (`cgroups/timeline_snapshot.py`).

    .venv/bin/python bench/timeline_snapshot.py [--containers 500] [--passes 20]

N containers sampled every second (a rollout: all of them hot), each ring full (10-minute
window at 1 Hz: 173 samples); each pass appends one sample to every ring and refreshes the
snapshot, as the worker does.  Prints the bytes the snapshot holds (tracemalloc, what the
copies allocate and keep), and CPU seconds per pass (`time.process_time`, this process
only), beside the old way's cost for comparison: every ring's samples as objects.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

from oomwatch.cgroups.ring import DecimatedRing
from oomwatch.cgroups.timeline_snapshot import SnapshotMaker

ROW = (100 << 20, 256 << 20, 60 << 20, 30 << 20, 0, 0, 5 << 20, -1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--containers", type=int, default=500)
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    rings = {f"/c{i}": DecimatedRing(1.0, 600.0, 60.0, 10.0) for i in range(args.containers)}
    t = 0.0
    for t in range(601):  # fill every ring
        for ring in rings.values():
            ring.append(float(t), ROW)
    maker = SnapshotMaker(600.0, 1.0)
    cpu_s: list[float] = []
    objects_s: list[float] = []
    tracemalloc.start()
    for n in range(args.passes):
        now = 601.0 + n
        for ring in rings.values():
            ring.append(now, ROW)
        started = time.process_time()
        snapshot = maker.refresh(rings.items(), now_s=now)
        cpu_s.append(time.process_time() - started)
        started = time.process_time()
        as_objects = {rel: tuple(ring.samples()) for rel, ring in rings.items()}
        objects_s.append(time.process_time() - started)
        del as_objects
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    samples = len(snapshot.windows["/c0"].samples())
    print(
        json.dumps(
            {
                "containers": args.containers,
                "samples_per_ring": samples,
                "snapshot_bytes_per_container": sum(
                    len(w.times) + len(w.values) for w in snapshot.windows.values()
                )
                // args.containers,
                "traced_bytes_held": held,
                "cpu_ms_per_pass_median": round(sorted(cpu_s)[len(cpu_s) // 2] * 1e3, 2),
                "as_objects_cpu_ms_per_pass_median": round(
                    sorted(objects_s)[len(objects_s) // 2] * 1e3, 2
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
