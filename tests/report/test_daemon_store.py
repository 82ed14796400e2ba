"""End to end on the real kernel: `oomwatch run` records a kill in its store, and
`oomwatch report --store` shows it with its identity, timeline, findings and HTML plot."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from oomwatch.lab import ScratchMemcg, kubelet_layout, provoke_kill
from oomwatch.lab.fixtures import memcg_v1, scratch

__all__ = ["memcg_v1", "scratch"]

MIB = 1 << 20
CONTAINER_ID = "5e1f" * 16

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_daemon(state: Path) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "oomwatch.cli",
        "run",
        "--standalone",
        "--state-dir",
        str(state),
        "--metrics-address",
        f"127.0.0.1:{_free_port()}",
        "--cgroup-root",
        "/sys/fs/cgroup",
        "--log-format",
        "json",
        "--sample-interval-s",
        "0.25",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if json.loads(line).get("event") == "started":
            return proc
    proc.kill()
    raise AssertionError(f"oomwatch run did not start: {proc.stderr.read().decode()[-2000:]}")


def test_daemon_store_to_report(report, scratch: ScratchMemcg, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    daemon = _start_daemon(state)
    try:
        pod_uid = str(uuid.uuid4())
        container = kubelet_layout(
            scratch, pod_uid, CONTAINER_ID, qos="burstable", container_limit_bytes=64 * MIB
        )
        time.sleep(2.0)  # let the watcher discover the new container and sample it
        capture = provoke_kill(
            container, mode="anon", mb=120, step_mb=8, step_interval_s=0.25, comm="grower"
        )
        deadline = time.monotonic() + 30.0
        ours: list[dict] = []  # type: ignore[type-arg]
        while time.monotonic() < deadline and not ours:
            run = report("--store", str(state), "--json", "--pod", pod_uid)
            if run.rc == 0:
                ours = [
                    i
                    for i in run.json()["incidents"]
                    if any(v["pid"] == capture.hog.pid for v in i["victims"])
                ]
            time.sleep(0.5)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(15)
    assert len(ours) == 1, "the daemon did not store our kill"
    [incident] = ours
    assert incident["pod_uid"] == pod_uid and incident["container_id"] == CONTAINER_ID
    codes = {f["code"] for f in incident["findings"]}
    assert "limit-container" in codes
    assert incident["timeline"] is not None and incident["timeline"]["samples"]
    page = tmp_path / "r.html"
    run = report("--store", str(state), "--pod", pod_uid, "--html", str(page))
    assert run.rc == 0 and "VERDICT    grower" in run.out
    html = page.read_text()
    assert "Memory before the kill" in html and 'class="layer layer-anon"' in html
