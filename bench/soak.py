"""Soak: `oomwatch run --standalone` for hours over many real memcgs, with real kills.

Builds the overhead bench's kubelet-like tree (default 250 container memcgs with an idle
`sleep` each) plus one pod whose container (32 MiB limit) a 96 MiB hog is killed in every
`--kill-every-s` seconds, then runs the agent for `--hours`.  Every `--report-every-s` it
prints the agent's CPU (% of one core over that window), RSS and /healthz.  At the end it
stops the agent with SIGTERM and checks, in the store and in the agent's JSON log, that every
kill of the pod was recorded exactly once with the pod's UID and container ID.  Kills other
processes on the node cause meanwhile are recorded too; they are counted apart.

    sudo PYTHONPATH=. .venv/bin/python bench/soak.py [--hours 2] [--cgroups 250] \
        [--kill-every-s 60] [--report-every-s 600]

Needs root and the cgroup v1 memory controller; everything it makes is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import psutil
from overhead import build_tree, free_port, start_daemon, wait_healthy

from oomwatch.lab import ScratchMemcg, kubelet_layout, memcg_v1_unavailable_reason, spawn_hog
from oomwatch.store import IncidentStore

MiB = 1 << 20


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def logged_kills(log_path: Path, pod_uid: str) -> Counter[int]:
    """Victim pids of the agent's `oom_kill` lines for the pod (one JSON line per incident)."""
    pids: Counter[int] = Counter()
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "oom_kill" and event.get("k8s.pod.uid") == pod_uid:
            pids[int(event.get("process.pid") or 0)] += 1
    return pids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--cgroups", type=int, default=250)
    parser.add_argument("--kill-every-s", type=float, default=60.0)
    parser.add_argument("--report-every-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    reason = memcg_v1_unavailable_reason()
    if reason is not None:
        print(f"soak: cannot run: {reason}", file=sys.stderr)
        return 2
    pod_uid, container_id = str(uuid.uuid4()), uuid.uuid4().hex * 2
    killed: list[int] = []
    unhealthy = 0
    with ScratchMemcg(256 * MiB) as scratch, tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp)
        build_tree(scratch, args.cgroups)
        victim_memcg = kubelet_layout(
            scratch, pod_uid, container_id, container_limit_bytes=32 * MiB
        )
        port = free_port()
        agent = start_daemon(state_dir, port)
        try:
            wait_healthy(port)
            proc = psutil.Process(agent.pid)
            started = time.monotonic()
            end = started + args.hours * 3600.0
            next_kill = started
            next_report = started + args.report_every_s
            window_cpu = start_cpu = sum(proc.cpu_times()[:2])  # start-up left out
            window_start = started
            print(f"soak: agent pid {agent.pid}, pod {pod_uid}, {args.hours} h", flush=True)
            while time.monotonic() < end:
                now = time.monotonic()
                if now >= next_kill:
                    hog = spawn_hog(victim_memcg, mode="anon", mb=96, comm="soak-hog")
                    if hog.wait(60) == -signal.SIGKILL:
                        killed.append(hog.pid)
                    next_kill = now + args.kill_every_s
                if now >= next_report:
                    cpu = sum(proc.cpu_times()[:2])
                    share = 100.0 * (cpu - window_cpu) / (now - window_start)
                    ok = healthy(port)
                    unhealthy += not ok
                    print(
                        f"soak: t={(now - started) / 60:.0f} min cpu_percent_of_one_core="
                        f"{share:.3f} rss_mib={proc.memory_info().rss / MiB:.1f} "
                        f"healthz={'ok' if ok else 'FAILED'} kills={len(killed)}",
                        flush=True,
                    )
                    window_cpu, window_start = cpu, now
                    next_report = now + args.report_every_s
                time.sleep(max(0.0, min(next_kill, next_report, end) - time.monotonic()))
            total_s = time.monotonic() - started
            total_cpu = 100.0 * (sum(proc.cpu_times()[:2]) - start_cpu) / total_s
            rss_mib = proc.memory_info().rss / MiB
            alive = agent.poll() is None
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=30)
        store = IncidentStore.open_readonly(state_dir)
        try:
            incidents = store.query(pod=pod_uid)
            others = store.count() - len(incidents)
        finally:
            store.close()
        stored = Counter(i.victim.pid for i in incidents if i.victim is not None)
        logged = logged_kills(state_dir / "daemon.log", pod_uid)
    once = sum(1 for pid in killed if stored[pid] == 1 and logged[pid] == 1)
    # A kill whose records were overwritten before the agent read them (another process
    # flooding /dev/kmsg) is recorded from its counter alone: no victim pid.
    counter_only = sum(1 for i in incidents if i.kmsg_missing)
    ids_ok = all(i.container_id == container_id for i in incidents)
    print(
        f"soak: {total_s / 3600:.2f} h, agent alive at the end: {alive}, /healthz failures: "
        f"{unhealthy}; kills {len(killed)}, stored and logged exactly once by victim pid: "
        f"{once}, from the counter alone (report lost): {counter_only}; incidents of the "
        f"pod: {len(incidents)} (container ID right: {ids_ok}); other incidents in the store "
        f"(the kernel log's backlog, other kills on the node): {others}; "
        f"cpu_percent_of_one_core (whole run, kills included)={total_cpu:.3f} "
        f"rss_mib_at_end={rss_mib:.1f}"
    )
    exact = once + counter_only == len(killed) == len(incidents)
    return 0 if alive and exact and ids_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
