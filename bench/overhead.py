"""Overhead of watching and sampling many real memcgs: CPU (% of one core) and RSS.

Builds a kubelet-like scratch tree of N container memcgs (default 250, one pod each, an idle
`sleep` in each), then measures, with psutil, a process that watches their OOM counters and
samples their memory at 1 Hz for S seconds (default 60):

- `--target daemon` (default): `oomwatch run --standalone` as a node would run it (kernel log,
  store, metrics server and all);
- `--target loop`: only the cgroup watcher + timeline sampler + metrics gauges loop.

Targets from the issue: <= 0.5 % of one core and <= 64 MiB RSS.  Needs root and the cgroup v1
memory controller; every memcg and process it makes is removed at the end, also on failure.
Other cgroups on the node (other scratch trees) are watched too, as on a real node.

    sudo PYTHONPATH=. .venv/bin/python bench/overhead.py [--cgroups 250 | 100,250,500,1000,2000] \
        [--seconds 60] [--target daemon|loop]

With several counts it measures each in turn (a fresh tree each) and prints the growth per
container: the least-squares slope of CPU and RSS over the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import psutil

from oomwatch.lab import Memcg, ScratchMemcg, kubelet_layout, memcg_v1_unavailable_reason

MiB = 1 << 20
REPO = str(Path(__file__).resolve().parents[1])
WARMUP_S = 5.0


def build_tree(scratch: ScratchMemcg, count: int) -> list[Memcg]:
    """`count` burstable pods with one container each (32 MiB limit), an idle `sleep` in each."""
    containers = []
    for _ in range(count):
        container = kubelet_layout(
            scratch, str(uuid.uuid4()), uuid.uuid4().hex * 2, container_limit_bytes=32 * MiB
        )
        idle = subprocess.Popen(["sleep", "infinity"], stdin=subprocess.DEVNULL)
        scratch.track_process(idle)
        container.add_pid(idle.pid)
        containers.append(container)
    return containers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_daemon(state_dir: Path, port: int) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "oomwatch.cli",
        "run",
        "--standalone",
        "--state-dir",
        str(state_dir),
        "--metrics-address",
        f"127.0.0.1:{port}",
        "--cgroup-root",
        "/sys/fs/cgroup",
        "--log-format",
        "json",
    ]
    log = open(state_dir / "daemon.log", "wb")  # noqa: SIM115 - lives as long as the daemon
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_env()
    )


def _env() -> dict[str, str]:
    """Children import this checkout's `oomwatch`, installed or not."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
    return env


def wait_healthy(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("daemon did not become healthy")


def watched_by_daemon(log_path: Path) -> int | None:
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "started":
            value = event.get("cgroups_watched")
            return int(value) if value is not None else None
    return None


def run_loop(seconds: float) -> int:
    """The `--target loop` child: watcher + sampler + gauges at 1 Hz, nothing else."""
    from oomwatch.cgroups import CgroupWatcher, TimelineSampler
    from oomwatch.sinks.metrics import Metrics, SeriesLabels

    watcher = CgroupWatcher(["/sys/fs/cgroup"], poll_interval_s=1.0)
    sampler = TimelineSampler(interval_s=1.0, window_s=600.0)
    metrics = Metrics()
    print(json.dumps({"cgroups_watched": len(watcher.cgroups())}), flush=True)
    fd = watcher.fileno()
    end = time.monotonic() + seconds
    next_tick = time.monotonic()
    while time.monotonic() < end:
        timeout = max(0.0, next_tick - time.monotonic())
        if fd is not None:
            select.select([fd], [], [], timeout)
        else:
            time.sleep(timeout)
        watcher.poll_changes()
        if time.monotonic() >= next_tick:
            for cg, sample in sampler.sample(watcher.cgroups(), time.time()):
                labels = SeriesLabels(
                    "", "", cg.identity.container_id or "", cg.identity.pod_uid or ""
                )
                metrics.set_container_memory(labels, sample.usage_bytes, sample.limit_bytes)
            metrics.forget_stale()
            next_tick += 1.0
    return 0


def measure(proc: psutil.Process, seconds: float) -> tuple[float, float]:
    """CPU % of one core over `seconds`, and the peak RSS (MiB) seen meanwhile."""
    before = proc.cpu_times()
    start = time.monotonic()
    peak_rss = 0
    while time.monotonic() - start < seconds:
        peak_rss = max(peak_rss, proc.memory_info().rss)
        time.sleep(1.0)
    after = proc.cpu_times()
    elapsed = time.monotonic() - start
    used = (after.user - before.user) + (after.system - before.system)
    return 100.0 * used / elapsed, peak_rss / MiB


def parse_counts(text: str) -> list[int]:
    """`250` or `100,250,500`: container memcg counts, each a positive integer."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cgroups {text!r}: not a list of integers") from None
    if not counts or any(count <= 0 for count in counts):
        raise argparse.ArgumentTypeError(f"--cgroups {text!r}: counts must be positive")
    return counts


def measure_point(
    count: int, seconds: float, target: str, warmup_s: float = WARMUP_S
) -> tuple[int | None, float, float]:
    """One point of the curve: (cgroups watched, CPU % of a core, peak RSS MiB) with `count`."""
    with ScratchMemcg(256 * MiB) as scratch, tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        build_tree(scratch, count)
        print(f"built {count} container memcgs in {time.monotonic() - t0:.1f} s", flush=True)
        if target == "daemon":
            port = free_port()
            child = start_daemon(Path(tmp), port)
            try:
                try:
                    wait_healthy(port)
                except RuntimeError:
                    print((Path(tmp) / "daemon.log").read_text()[-3000:], file=sys.stderr)
                    raise
                time.sleep(warmup_s)
                cpu, rss = measure(psutil.Process(child.pid), seconds)
                watched = watched_by_daemon(Path(tmp) / "daemon.log")
            finally:
                child.terminate()
                child.wait(timeout=30)
        else:
            child = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--loop-child",
                    "--seconds",
                    str(seconds),
                    "--warmup-s",
                    str(warmup_s),
                ],
                stdout=subprocess.PIPE,
                env=_env(),
            )
            try:
                assert child.stdout is not None
                watched = json.loads(child.stdout.readline())["cgroups_watched"]
                time.sleep(warmup_s)
                cpu, rss = measure(psutil.Process(child.pid), seconds)
            finally:
                child.kill()
                child.wait(timeout=30)
    return watched, cpu, rss


def growth(points: list[tuple[int, float, float]]) -> tuple[float, float]:
    """Least-squares slope per container: (CPU % of a core, RSS KiB)."""
    n = len(points)
    mean_x = sum(p[0] for p in points) / n
    var_x = sum((p[0] - mean_x) ** 2 for p in points)
    if var_x == 0:
        return 0.0, 0.0
    mean_cpu = sum(p[1] for p in points) / n
    mean_rss = sum(p[2] for p in points) / n
    cpu = sum((p[0] - mean_x) * (p[1] - mean_cpu) for p in points) / var_x
    rss = sum((p[0] - mean_x) * (p[2] - mean_rss) for p in points) / var_x
    return cpu, rss * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cgroups", type=parse_counts, default=[250], help="e.g. 100,250,500")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--warmup-s", type=float, default=WARMUP_S, help="wait after start before measuring"
    )
    parser.add_argument("--target", choices=("daemon", "loop"), default="daemon")
    parser.add_argument("--loop-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loop_child:
        return run_loop(args.seconds + args.warmup_s + 5.0)

    reason = memcg_v1_unavailable_reason()
    if reason is not None:
        print(f"overhead: cannot run: {reason}", file=sys.stderr)
        return 2
    points: list[tuple[int, float, float]] = []
    for count in args.cgroups:
        watched, cpu, rss = measure_point(count, args.seconds, args.target, args.warmup_s)
        points.append((count, cpu, rss))
        verdict = "PASS" if cpu <= 0.5 and rss <= 64 else "OVER TARGET"
        print(
            f"target={args.target} container_memcgs={count} cgroups_watched={watched} "
            f"seconds={args.seconds:.0f} cpu_percent_of_one_core={cpu:.3f} peak_rss_mib={rss:.1f} "
            f"load={os.getloadavg()[0]:.2f} (targets <= 0.5 % and <= 64 MiB: {verdict})",
            flush=True,
        )
    if len(points) > 1:
        cpu_slope, rss_slope = growth(points)
        print(
            f"growth per container (least squares over {len(points)} points): "
            f"cpu_percent_of_one_core={cpu_slope:.5f} rss_kib={rss_slope:.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
