"""Training steps per second with and without the oomwatch probe sampling at 1 Hz.

    .venv/bin/python bench/probe_overhead.py [--seconds 10] [--rounds 6]

Runs the same MLP training step (synthetic batch, Adam) in alternating rounds with and
without the probe (both call a phase report every step, as the trainer does), so drift in
machine load hits both sides alike; prints steps/s per round, the median slowdown, and the
process CPU time per step (the sampler thread's work included), which is what the probe
costs even when a shared machine makes wall-clock rates noisy, and the cost of one sample.
Target: <= 0.5 % slowdown.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import oomwatch.probe


def _no_report(phase: str, **where: int | None) -> None:
    """The same call the probe gets, doing nothing."""


def measure(
    seconds: float, report: Callable[..., None], args: argparse.Namespace
) -> tuple[float, float]:
    """(steps per wall second, process CPU milliseconds per step) over one round."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(args.features, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    x = torch.randn(args.batch, args.features)
    y = torch.randint(0, 10, (args.batch,))
    for _ in range(20):  # warm up allocator and kernels
        optimiser.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimiser.step()
    steps = 0
    cpu_start = time.process_time()
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        optimiser.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimiser.step()
        steps += 1
        report("train", epoch=0, step=steps, batch_size=args.batch)
    return steps / elapsed, (time.process_time() - cpu_start) * 1000 / steps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0, help="per round")
    p.add_argument("--rounds", type=int, default=6, help="rounds per side, alternating")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--interval-s", type=float, default=1.0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    without: list[tuple[float, float]] = []
    with_probe: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as directory:
        for round_no in range(args.rounds):
            without.append(measure(args.seconds, _no_report, args))
            probe = oomwatch.probe.start(directory, interval_s=args.interval_s, excepthooks=False)
            with_probe.append(measure(args.seconds, probe.set_phase, args))
            probe.stop()
            print(
                f"round {round_no + 1}: without {without[-1][0]:8.1f} steps/s "
                f"{without[-1][1]:6.3f} CPU ms/step   with probe {with_probe[-1][0]:8.1f} "
                f"steps/s {with_probe[-1][1]:6.3f} CPU ms/step",
                flush=True,
            )
        probe = oomwatch.probe.start(directory, interval_s=3600, excepthooks=False)
        t0 = time.perf_counter()
        for _ in range(50):
            probe.sample_now()
        sample_ms = (time.perf_counter() - t0) / 50 * 1000
        probe.stop()
    rate = [statistics.median(r for r, _ in side) for side in (without, with_probe)]
    cpu = [statistics.median(c for _, c in side) for side in (without, with_probe)]
    print(
        f"steps/s median: without {rate[0]:.1f}, with probe every {args.interval_s:g} s "
        f"{rate[1]:.1f} -> slowdown {100 * (1 - rate[1] / rate[0]):+.2f} %"
    )
    print(
        f"CPU ms/step median: without {cpu[0]:.3f}, with probe {cpu[1]:.3f} -> "
        f"{100 * (cpu[1] / cpu[0] - 1):+.2f} %"
    )
    print(
        f"one probe sample: {sample_ms:.3f} ms -> {sample_ms / 10 / args.interval_s:.4f} % "
        f"of one core at this interval"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
