"""How soon a /dev/kmsg reader sees a kill-line-like record: the kernel's wake-up vs re-reading.

printk stores a record at once, but wakes /dev/kmsg readers from the printing CPU's next
timer tick, which a serial console taking the record's level (`console=ttyS0`, console
loglevel above 3: a kill line is KERN_ERR) delays further: it writes the line with
interrupts off on that CPU.  This writes level-3 records of a kill line's length from one
CPU and reads them on another, (a) blocked in poll() on the kmsg fd (the kernel's
wake-up), (b) re-reading every millisecond (what the agent did after OOM news until the
per-stage breakdown of `bench/latency.py --breakdown` showed those re-reads never found a
kill line first: bench/RESULTS.md, issue 26), and prints, per mode, the time from the
write to the read and how long the write itself took.  Needs root (writing /dev/kmsg) and
two CPUs.

    sudo .venv/bin/python bench/kmsg_wake.py [--records 15] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import threading
import time

LINE_BYTES = 190  # a `Memory cgroup out of memory: Killed process ...` line
MODES = ("kernel-wake", "recheck-1ms")


def read_after_write(mode: str, seq: int, reader_cpu: int, writer_cpu: int) -> tuple[float, float]:
    """Seconds from the write to the read, and the write's own duration."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    os.lseek(fd, 0, os.SEEK_END)
    marker = f"oomwatch-bench-kmsg-wake-{os.getpid()}-{mode}-{seq}".encode()
    seen_at: list[float] = []
    ready = threading.Event()

    def reader() -> None:
        os.sched_setaffinity(0, {reader_cpu})
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        ready.set()
        until = time.monotonic() + 2.0
        while time.monotonic() < until:
            poller.poll(2000 if mode == "kernel-wake" else 1)
            while True:
                try:
                    raw = os.read(fd, 8192)
                except BlockingIOError:
                    break
                if marker in raw:
                    seen_at.append(time.monotonic())
                    return

    thread = threading.Thread(target=reader)
    thread.start()
    ready.wait()
    time.sleep(0.01)  # the reader is asleep in poll()
    os.sched_setaffinity(0, {writer_cpu})
    record = b"<3>" + marker + b" " + b"x" * max(0, LINE_BYTES - len(marker)) + b"\n"
    writer = os.open("/dev/kmsg", os.O_WRONLY)
    try:
        started = time.monotonic()
        os.write(writer, record)
        written = time.monotonic()
    finally:
        os.close(writer)
    thread.join()
    os.close(fd)
    seen = seen_at[0] if seen_at else float("nan")
    return seen - started, written - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=15, help="records per mode and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, modes alternated")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("kmsg_wake needs two CPUs", file=sys.stderr)
        return 1
    with open("/proc/sys/kernel/printk") as levels:
        print(f"kernel.printk (console loglevel first): {levels.read().split()}")
    for _ in range(args.rounds):
        for mode in MODES:
            reads, writes = [], []
            for seq in range(args.records):
                read_s, write_s = read_after_write(mode, seq, cpus[-1], cpus[0])
                reads.append(read_s * 1e3)
                writes.append(write_s * 1e3)
                time.sleep(0.02)
            reads.sort()
            writes.sort()
            print(
                f"{mode}: write -> read p50 {reads[len(reads) // 2]:.2f} ms, max "
                f"{reads[-1]:.2f} ms; the write itself p50 {writes[len(writes) // 2]:.2f} ms, "
                f"max {writes[-1]:.2f} ms (n={len(reads)}, load {os.getloadavg()[0]:.1f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
