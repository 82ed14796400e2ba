"""How late this machine wakes a sleeping thread: the floor under any kill-to-log figure.

A thread asks to wake at a deadline (`time.sleep` to an absolute CLOCK_MONOTONIC grid) every
`--period-ms`, as cyclictest does, and records how late it ran after each.  A late wake is
time the thread was ready and not running: another task, the kernel (a console write, an
irq), or the hypervisor holding the virtual CPU.  `bench/latency.py`'s kill-to-log figure on
the same machine pays these stalls on top of the agent's own few milliseconds per kill, and
its p99 over ~30 kills is their slowest.

    .venv/bin/python bench/wake_jitter.py [--seconds 30] [--period-ms 1,20]
        [--late-log FILE] [--against LATENCY_OUTPUT]

Prints, per period: wakes, lateness p50 / p99 / p99.9 / max, and how many wakes were 2, 5 and
10 ms or more late, with the load average before and after.  `--late-log FILE` writes each
wake 1 ms or more late (its CLOCK_MONOTONIC time and lateness); run beside
`bench/latency.py --per-kill`, `--against` that run's output then says, for the kills over
10 ms and the rest, how many had a late wake of this thread inside their kernel-stamp-to-log
window: the machine stalling everything, not the agent's work.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from pathlib import Path

NS_PER_MS = 1_000_000
LATE_LOG_MS = 1.0  # wakes at least this late go to `--late-log`


def late_wakes_ns(
    seconds: float, period_ns: int, late_log: list[tuple[float, float]] | None = None
) -> list[int]:
    """Lateness of each absolute-deadline wake over `seconds`, in nanoseconds; the wakes
    `LATE_LOG_MS` or more late go to `late_log` as (CLOCK_MONOTONIC s, lateness ms)."""
    lateness: list[int] = []
    deadline = time.monotonic_ns() + period_ns
    end = deadline + int(seconds * 1e9)
    while deadline < end:
        time.sleep(max(0, deadline - time.monotonic_ns()) / 1e9)
        woke = time.monotonic_ns()
        lateness.append(max(0, woke - deadline))
        if late_log is not None and woke - deadline >= LATE_LOG_MS * NS_PER_MS:
            late_log.append((woke / 1e9, (woke - deadline) / NS_PER_MS))
        # The next deadline on the grid, skipping any the thread slept through.
        deadline += period_ns * (1 + max(0, woke - deadline) // period_ns)
    return lateness


def quantile_ms(sorted_ns: list[int], q: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / NS_PER_MS


def report(period_ms: float, lateness_ns: list[int]) -> str:
    ordered = sorted(lateness_ns)
    over = {limit: sum(1 for n in ordered if n >= limit * NS_PER_MS) for limit in (2, 5, 10)}
    return (
        f"period {period_ms:g} ms: {len(ordered)} wakes, late p50 "
        f"{statistics.median(ordered) / NS_PER_MS:.3f} ms, p99 {quantile_ms(ordered, 0.99):.3f},"
        f" p99.9 {quantile_ms(ordered, 0.999):.3f}, max {ordered[-1] / NS_PER_MS:.3f};"
        f" >= 2 ms: {over[2]}, >= 5 ms: {over[5]}, >= 10 ms: {over[10]}"
    )


KILL_LINE = re.compile(r"kill \d+: pid=\d+ kernel=([\d.]+) arrived=([\d.]+) latency=([\d.]+) ms")
SLOW_MS = 10.0


def against(latency_output: Path, late_log: Path) -> str:
    """How many slow and other kills of a `latency.py --per-kill` run had a late wake of
    this thread inside their window (kernel stamp to log line)."""
    kills = [tuple(map(float, m.groups())) for m in KILL_LINE.finditer(latency_output.read_text())]
    late = [tuple(map(float, line.split())) for line in late_log.read_text().splitlines()]
    lines = []
    for name, chosen in (
        (f"kills over {SLOW_MS:g} ms", [k for k in kills if k[2] > SLOW_MS]),
        ("other kills", [k for k in kills if k[2] <= SLOW_MS]),
    ):
        # A wake `ms` late at `woke`: the thread was ready and not running from `woke - ms`.
        hit = [k for k in chosen if any(w - ms / 1e3 <= k[1] and w >= k[0] for w, ms in late)]
        lines.append(
            f"{name}: {len(chosen)}, with a late wake (>= {LATE_LOG_MS:g} ms) "
            f"of this thread inside: {len(hit)}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--period-ms", default="1,20", help="comma-separated periods")
    parser.add_argument("--late-log", type=Path, help="write the late wakes here")
    parser.add_argument("--against", type=Path, help="a latency.py --per-kill run's output")
    args = parser.parse_args()
    if args.against is not None:
        if args.late_log is None:
            parser.error("--against needs the --late-log of the run beside it")
        print(against(args.against, args.late_log))
        return
    print(f"load average before: {os.getloadavg()}; {os.cpu_count()} CPUs")
    late: list[tuple[float, float]] = []
    for period in (float(p) for p in args.period_ms.split(",")):
        print(report(period, late_wakes_ns(args.seconds, int(period * NS_PER_MS), late)))
    print(f"load average after: {os.getloadavg()}")
    if args.late_log is not None:
        args.late_log.write_text("".join(f"{at:.6f} {ms:.3f}\n" for at, ms in late))


if __name__ == "__main__":
    main()
