"""Kill-to-record latency of `oomwatch run`: real OOM kills, p50/p99, with and without a report.

For each kill in a scratch kubelet-like memcg, the latency is measured from the kernel's own
record timestamp (`kernel_time_s`, CLOCK_MONOTONIC, corrected by the measured offset of the
kmsg clock) to the incident's JSON log line reaching this process.  The agent writes that
line only after the incident is stored and counted in the metrics, and right when it arrives
this script checks that the store returns the incident and /metrics shows the count, so the
figure bounds all three (polling the agent continuously would slow it down and measure the
poller).  Targets: p99 <= 15 ms with a full report; p99 <= 100 ms for a kill whose report
the kernel rate-limited (a bare `Killed process` line: the agent places it by a counter pass
it asks for at once).  For those, the script first spends the kernel's report budget (10 per
5 s) with small kills in another memcg.  Needs root and the memory controller on cgroup v1 or
v2 (the lab's scratch memcgs).  On v2 `memory.oom.group` stays 0, as a kubelet with
`singleProcessOOMKill` (or older than 1.28) leaves it, so a report closes at its kill line as
on v1; where a group kill can add members the agent waits 100 ms for them by design.

    sudo .venv/bin/python bench/latency.py [--kills 50] [--header-less 50]
        [--probe-flood DIRS,ENTRIES] [--breakdown]

`--breakdown`: the agent runs under `bench/latency_trace.py`'s timing hooks, and each full-report
kill's time is split into stages (kernel stamp -> the read that finds its kill line starts,
the read, decoding until the report closes, reconciliation, diagnosis + store, metric, log
line, the pipe), with the cyclic GC's and the cgroup worker's time inside the kill's window
(`sample`: the part of it that was sample passes); the slowest three kills are shown whole.
The hooks add a little to every figure.

`--probe-flood 10,100000`: the agent's probe directory holds that many pod directories of
that many entries (hard links), as a hostile pod may make them (issue 22): the kills' latency
must not grow, since the kernel-log thread never walks the probe directory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from overhead import free_port  # noqa: E402

from oomwatch.lab import (  # noqa: E402
    Memcg,
    ScratchMemcg,
    kubelet_layout,
    lab_cgroup_version,
    lab_unavailable_reason,
    spawn_hog,
    wait_rate_limit_window,
)
from oomwatch.lab.kmsg import RATE_LIMIT_BURST, RATE_LIMIT_INTERVAL_S, recent_headers  # noqa: E402
from oomwatch.sources.kmsg import (  # noqa: E402
    KmsgCursor,
    read_backlog,
    read_boot_id,
    record_seq,
)
from oomwatch.store import IncidentStore  # noqa: E402

MIB = 1 << 20
TRACE_WRAPPER = Path(__file__).resolve().parent / "latency_trace.py"
# (stage, from event, to event) of `latency_trace.py`'s stamps; "stamp" is the kernel's record
# time and "arrived" the line's arrival here
STAGES = (
    ("wake", "stamp", "read"),
    ("read", "read", "kill_read"),
    ("decode", "kill_read", "closed"),
    ("reconcile", "closed", "commit"),
    ("diagnose+store", "commit", "stored"),
    ("metric", "stored", "metric"),
    ("log", "metric", "logged"),
    ("pipe", "logged", "arrived"),
)


def kmsg_clock_offset_s() -> float:
    """kmsg timestamp minus CLOCK_MONOTONIC, from a record we write (should be ~0)."""
    marker = f"oomwatch-bench-clock-{uuid.uuid4().hex}"
    with open("/dev/kmsg", "w") as kmsg:
        before = time.monotonic()
        kmsg.write(marker + "\n")
        kmsg.flush()
        after = time.monotonic()
    for raw in read_backlog():
        if marker.encode() in raw:
            stamp_s = int(raw.split(b";", 1)[0].split(b",")[2]) / 1e6
            return stamp_s - (before + after) / 2
    raise RuntimeError("marker record not found in /dev/kmsg")


def probe_flood(directory: Path, dirs: int, entries: int) -> None:
    """`dirs` pod directories of `entries` hard links each in `directory`."""
    for d in range(dirs):
        pod = directory / f"1b2c0000-{d:04d}-4000-8000-000000000000"
        pod.mkdir(parents=True)
        for i in range(entries):
            if i % 50_000 == 0:  # ext4 takes 65,000 links to an inode
                source = directory / f".junk{d}.{i}"
                source.write_bytes(b"x")
            os.link(source, pod / f"j{i}")


def read_trace(path: Path) -> list[tuple[float, str, str, str]]:
    """`latency_trace.py`'s lines: (time, thread, event, detail)."""
    out = []
    for line in path.read_text().splitlines():
        at, thread, event, *detail = line.split(" ")
        out.append((float(at), thread, event, detail[0] if detail else ""))
    return out


def overlap_s(
    trace: list[tuple[float, str, str, str]],
    start: str,
    end: str,
    window: tuple[float, float],
    detail: str | None = None,
) -> float:
    """Time spent between `start` and `end` events inside `window` (`detail`: only the
    spans whose `start` has that detail, e.g. the worker's `sample` passes)."""
    total, began = 0.0, None
    for at, _, event, mark in trace:
        if event == start and detail in (None, mark):
            began = at
        elif event == end and began is not None:
            total += max(0.0, min(at, window[1]) - max(began, window[0]))
            began = None
    return total


def kill_stages(
    trace: list[tuple[float, str, str, str]], pid: int, kernel_s: float, arrived_s: float
) -> dict[str, float] | None:
    """One kill's stage times (s), with `gc`, `worker`, `news` (OOM notification queued,
    relative to the stamp), `reads` (reads since the stamp that did not find it) and `sample`
    (the part of `worker` that was sample passes)."""
    times = {"stamp": kernel_s, "arrived": arrived_s}
    mine = str(pid)
    last_read = None
    for at, _, event, detail in trace:
        if event == "read":
            last_read = at
        elif event == "kill_read" and detail == mine and "kill_read" not in times:
            times["kill_read"] = at
            if last_read is not None:
                times["read"] = last_read
        elif event in ("closed", "commit", "stored", "metric", "logged") and detail == mine:
            times.setdefault(event, at)
    if any(event not in times for _, event, _ in STAGES[1:]):
        return None
    out = {name: times[b] - times[a] for name, a, b in STAGES}
    window = (kernel_s, arrived_s)
    out["gc"] = overlap_s(trace, "gc", "gc_end", window)
    out["worker"] = overlap_s(trace, "worker", "worker_end", window)
    out["sample"] = overlap_s(trace, "worker", "worker_end", window, "sample")
    signals = [at for at, _, e, _ in trace if e == "oom_signal" and abs(at - kernel_s) < 0.05]
    out["news"] = signals[0] - kernel_s if signals else float("nan")
    out["reads"] = sum(1 for at, _, e, _ in trace if e == "read" and kernel_s <= at < times["read"])
    return out


def print_breakdown(kills: list[tuple[int, float, dict[str, float]]], every: bool) -> None:
    """Per stage p50 / max over the kills, then the slowest three kills (`every`: all) whole
    (ms)."""
    if not kills:
        print("breakdown: no traced kill")
        return
    names = [name for name, _, _ in STAGES] + ["gc", "worker", "sample"]
    print("breakdown (ms), p50 / max over", len(kills), "kills:")
    for name in names:
        values = [stages[name] * 1e3 for _, _, stages in kills]
        print(f"  {name:15s} {pct(values, 50):6.2f} / {max(values):6.2f}")
    news = [stages["news"] * 1e3 for _, _, stages in kills if stages["news"] == stages["news"]]
    before = sum(1 for n in news if n < 0)
    print(f"  OOM news before the stamp in {before} of {len(news)} kills with news")
    print("every kill, slowest first (ms):" if every else "slowest three (ms):")
    for pid, total_s, stages in sorted(kills, key=lambda k: -k[1])[: None if every else 3]:
        parts = " ".join(f"{name}={stages[name] * 1e3:.2f}" for name in names)
        print(
            f"  pid {pid}: {total_s * 1e3:.2f} = {parts} news={stages['news'] * 1e3:+.2f} "
            f"missed_reads={int(stages['reads'])}"
        )


class Agent:
    def __init__(
        self,
        state_dir: Path,
        wrapper: str | None = None,
        cpus: set[int] | None = None,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        last = None
        for raw in read_backlog():
            last = record_seq(raw) if record_seq(raw) is not None else last
        store = IncidentStore(state_dir)
        if last is not None:
            store.save_cursor(KmsgCursor(read_boot_id(), last))
        store.close()
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *(["-m", "oomwatch.cli"] if wrapper is None else [wrapper]),
                "run",
                "--standalone",
                "--state-dir",
                str(state_dir),
                "--metrics-address",
                f"127.0.0.1:{self.port}",
                "--cgroup-root",
                "/sys/fs/cgroup",
                "--log-format",
                "json",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        self.lines: dict[int, tuple[float, dict[str, Any]]] = {}
        self.arrived = threading.Condition()
        self.started = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self.started.wait(30):
            raise RuntimeError("oomwatch run did not start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            now = time.monotonic()
            entry = json.loads(raw)
            if entry.get("event") == "started":
                self.started.set()
            if entry.get("event") == "oom_kill" and entry.get("process.pid"):
                with self.arrived:
                    self.lines[int(entry["process.pid"])] = (now, entry)
                    self.arrived.notify_all()

    def wait_line(self, pid: int, timeout_s: float) -> tuple[float, dict[str, Any]] | None:
        with self.arrived:
            self.arrived.wait_for(lambda: pid in self.lines, timeout_s)
            return self.lines.get(pid)

    def kills_metric(self, pod_uid: str) -> float:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return sum(  # one series per kind, scope and attribution
                float(line.rsplit(" ", 1)[1])
                for line in r.read().decode().splitlines()
                if line.startswith("oomwatch_oom_kills_total{") and f'pod_uid="{pod_uid}"' in line
            )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary(name: str, values_s: list[float]) -> str:
    if not values_s:
        return f"{name}: no samples"
    ms = [v * 1000 for v in values_s]
    return (
        f"{name}: n={len(ms)} p50={pct(ms, 50):.1f} ms p99={pct(ms, 99):.1f} ms "
        f"max={max(ms):.1f} ms mean={statistics.fmean(ms):.1f} ms"
    )


def spend_report_budget(memcg: Memcg) -> None:
    """Kill small children until the kernel has printed its 10 reports of this interval."""
    used = recent_headers(RATE_LIMIT_INTERVAL_S - 0.5)
    if used >= RATE_LIMIT_BURST:
        return
    children = RATE_LIMIT_BURST - used
    hog = spawn_hog(
        memcg, mode="child-worker", mb=32, comm="spender", children=children, linger_s=0
    )
    hog.wait_for_count("child-exit", children, timeout_s=30)
    hog.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=50, help="kills with a full report")
    parser.add_argument("--header-less", type=int, default=50, help="kills without one")
    parser.add_argument(
        "--per-kill",
        action="store_true",
        help="print each kill's kernel stamp and the line's arrival (CLOCK_MONOTONIC, s)",
    )
    parser.add_argument(
        "--wrapper",
        metavar="SCRIPT",
        help="run the agent as `python SCRIPT run ...` (e.g. a script adding timing hooks "
        "and calling oomwatch.cli.main) instead of `python -m oomwatch.cli run ...`",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the agent on the last CPU, this script and its kills on the others: the killed "
        "task's CPU may be busy writing the kill line to a serial console (interrupts off); "
        "this separates the agent's own latency from that",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="the agent under bench/latency_trace.py's hooks: each full-report kill split "
        "into stages, the slowest three shown",
    )
    parser.add_argument(
        "--without",
        metavar="MEASURES",
        default="",
        help="with --breakdown: turn the agent's latency settings off for an A/B "
        "(comma-separated: switch, freeze; see bench/latency_trace.py)",
    )
    parser.add_argument(
        "--trace-file",
        metavar="PATH",
        help="with --breakdown: keep the hooks' raw trace there",
    )
    parser.add_argument(
        "--probe-flood",
        metavar="DIRS,ENTRIES",
        default=None,
        help="pod directories of hard links in its probe directory",
    )
    args = parser.parse_args()
    agent_cpus = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            print("--pin needs two CPUs", file=sys.stderr)
            return 1
        agent_cpus = {cpus[-1]}
        os.sched_setaffinity(0, set(cpus[:-1]))  # the kills are spawned from here
    reason = lab_unavailable_reason()
    if reason:
        print(f"latency bench needs real kills: {reason}", file=sys.stderr)
        return 1
    print(f"cgroup v{lab_cgroup_version()}")
    offset_s = kmsg_clock_offset_s()
    print(f"kmsg clock - CLOCK_MONOTONIC: {offset_s * 1e3:+.3f} ms")
    latency_s: list[float] = []
    suppressed_s: list[float] = []
    not_visible = 0
    with tempfile.TemporaryDirectory() as tmp, ScratchMemcg() as scratch:
        state_dir = Path(tmp)
        extra: list[str] = []
        if args.probe_flood:
            dirs, entries = (int(n) for n in args.probe_flood.split(","))
            started = time.monotonic()
            probe_flood(state_dir / "probe", dirs, entries)
            print(f"probe flood: {dirs} x {entries} entries in {time.monotonic() - started:.0f} s")
            extra = ["--probe-dir", str(state_dir / "probe")]
        trace_path = state_dir / "latency-trace"
        wrapper, env = args.wrapper, None
        if args.breakdown:
            wrapper = str(TRACE_WRAPPER)
            env = {
                "OOMWATCH_LATENCY_TRACE": str(trace_path),
                "OOMWATCH_LATENCY_WITHOUT": args.without,
            }
        agent = Agent(state_dir, wrapper, agent_cpus, tuple(extra), env)
        traced: list[tuple[int, float, float]] = []  # pid, kernel stamp, arrival
        reader = IncidentStore.open_readonly(state_dir)
        uid, cid = str(uuid.uuid4()), uuid.uuid4().hex * 2
        memcg = kubelet_layout(scratch, uid, cid, container_limit_bytes=32 * MIB)
        spender = scratch.create_child("spender", 16 * MIB)
        try:
            for n in range(1, args.kills + args.header_less + 1):
                if n <= args.kills:
                    wait_rate_limit_window()
                else:
                    spend_report_budget(spender)
                hog = spawn_hog(memcg, mode="anon", mb=96, comm="bench-hog")
                hog.wait(30)
                got = agent.wait_line(hog.pid, 5.0)
                if got is None:
                    print(f"kill {n}: no log line within 5 s", file=sys.stderr)
                    continue
                stored = any(i.victim and i.victim.pid == hog.pid for i in reader.query(last=5))
                counted = agent.kills_metric(uid) >= n
                not_visible += not (stored and counted)
                arrived, line = got
                kernel_s = float(line["kernel_time_s"]) - offset_s
                if args.per_kill:
                    print(
                        f"kill {n}: pid={hog.pid} kernel={kernel_s:.6f} arrived={arrived:.6f} "
                        f"latency={(arrived - kernel_s) * 1e3:.2f} ms "
                        f"header_suppressed={line['header_suppressed']}"
                    )
                (suppressed_s if line["header_suppressed"] else latency_s).append(
                    arrived - kernel_s
                )
                if not line["header_suppressed"]:
                    traced.append((hog.pid, kernel_s, arrived))
        finally:
            reader.close()
            agent.stop()
        if args.breakdown:
            trace = read_trace(trace_path)
            if args.trace_file:
                Path(args.trace_file).write_text(trace_path.read_text())
            kills = []
            for pid, kernel_s, arrived in traced:
                stages = kill_stages(trace, pid, kernel_s, arrived)
                if stages is not None:
                    kills.append((pid, arrived - kernel_s, stages))
            print_breakdown(kills, args.per_kill)
    total = args.kills + args.header_less
    print(f"kills: {total}; not stored or not on /metrics when the line came: {not_visible}")
    print(summary("kernel record -> stored + on /metrics + log line", latency_s))
    print(summary("header-less kill record -> stored + on /metrics + log line", suppressed_s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
