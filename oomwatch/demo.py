"""`oomwatch demo`: see the agent record a real OOM kill in about ten seconds.

Builds a scratch kubelet-like memcg tree (`/oomwatch-lab-*/kubepods/burstable/pod<uid>/<id>`)
with a small limit, runs the same agent as `oomwatch run` in-process (standalone, temporary
state dir, metrics on a free loopback port), starts a process that allocates past the limit,
and prints the incident the agent stored.  Everything it made is removed afterwards.
Needs root, the memory controller on cgroup v1 or v2 (it uses whichever the host has, and
says which) and a readable /dev/kmsg.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from oomwatch.daemon.agent import Agent
from oomwatch.daemon.config import DaemonConfig
from oomwatch.incident import Incident
from oomwatch.lab import (
    ScratchMemcg,
    kubelet_layout,
    lab_cgroup_version,
    lab_unavailable_reason,
    spawn_hog,
    wait_rate_limit_window,
)
from oomwatch.sinks.log import setup_logging
from oomwatch.sources.kmsg import KMSG_PATH, KmsgCursor, read_backlog, read_boot_id, record_seq
from oomwatch.store import IncidentStore
from oomwatch.units import MIB

WAIT_S = 10.0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit-mb", type=int, default=64, help="container memory limit")
    parser.add_argument("--json", action="store_true", help="print the incident as JSON")
    parser.add_argument(
        "--log-format",
        choices=("json", "console"),
        default="console",
        help="format of the agent's own log (on stderr)",
    )


def start_at_log_end(state_dir: Path) -> None:
    """Seed the cursor at the current end of the kernel log: the demo shows only its own kill."""
    last = None
    for raw in read_backlog(KMSG_PATH):
        last = record_seq(raw) if record_seq(raw) is not None else last
    store = IncidentStore(state_dir)
    try:
        if last is not None:
            store.save_cursor(KmsgCursor(read_boot_id(), last))
    finally:
        store.close()


def _wait_for_incident(state_dir: Path, relpath: str, deadline_s: float) -> Incident | None:
    while time.monotonic() < deadline_s:
        reader = IncidentStore.open_readonly(state_dir)
        try:
            for incident in reader.query():
                if (incident.task_memcg or "").startswith(relpath):
                    return incident
        finally:
            reader.close()
        time.sleep(0.1)
    return None


def _render(incident: Incident, as_json: bool) -> str:
    if not as_json:
        try:
            from oomwatch.report.text import render_incident

            return render_incident(incident, 1, 1)
        except ImportError:
            pass
    return json.dumps(incident.to_dict(), indent=2)


def main(args: argparse.Namespace) -> int:
    version = lab_cgroup_version()
    if version is None:
        print(
            f"oomwatch demo: cannot provoke a real OOM kill here: {lab_unavailable_reason()}",
            file=sys.stderr,
        )
        return 1
    setup_logging(args.log_format, stream=sys.stderr)
    pod_uid = str(uuid.uuid4())
    container_id = uuid.uuid4().hex + uuid.uuid4().hex
    with (
        tempfile.TemporaryDirectory(prefix="oomwatch-demo-") as tmp,
        ScratchMemcg(version=version) as scratch,
    ):
        print(
            f"oomwatch demo: cgroup v{version} (the memory controller is at {scratch.mount})",
            file=sys.stderr,
        )
        state_dir = Path(tmp)
        container = kubelet_layout(
            scratch, pod_uid, container_id, container_limit_bytes=args.limit_mb * MIB
        )
        start_at_log_end(state_dir)
        wait_rate_limit_window()
        # Started before the agent, ramping slowly: the agent samples the growth into the
        # incident's timeline, and the lab's hog helper never sees the agent's many fds.
        step_mb = max(1, args.limit_mb // 16)
        hog = spawn_hog(
            container,
            mode="anon",
            mb=args.limit_mb * 4,
            comm="demo-hog",
            step_mb=step_mb,
            step_interval_s=0.25,
        )
        print(
            f"pod {pod_uid}: demo-hog (pid {hog.pid}) grows past its {args.limit_mb} MiB "
            f"limit at {container.relpath}",
            file=sys.stderr,
        )
        config = DaemonConfig(
            node_name="demo",
            metrics_host="127.0.0.1",
            metrics_port=0,
            state_dir=state_dir,
            cgroup_roots=("/sys/fs/cgroup",),
            kmsg_path=KMSG_PATH,
            standalone=True,
            log_format=args.log_format,
            probe_dir=None,
            annotate_pods=False,
            sample_interval_s=0.5,
            timeline_window_s=600.0,
            enrich_wait_s=1.0,
            max_incidents=100,
            max_age_days=1.0,
        )
        agent = Agent(config)
        loop = threading.Thread(target=agent.run, name="oomwatch-demo-agent", daemon=True)
        loop.start()
        try:
            status = hog.wait(WAIT_S * 3)
            print(f"demo-hog ended with status {status}", file=sys.stderr)
            incident = _wait_for_incident(state_dir, container.relpath, time.monotonic() + WAIT_S)
        finally:
            agent.stop()
            loop.join(WAIT_S)
        if incident is None:
            print("oomwatch demo: the agent recorded no incident for the kill", file=sys.stderr)
            return 1
        print(_render(incident, args.json))
    return 0
