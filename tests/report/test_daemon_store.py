"""End to end on the real kernel: `oomwatch run` records a kill in its store, and
`oomwatch report --store` shows it with its identity, timeline, findings and HTML plot."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from support import until, wait_for
from support.agent import DaemonProcess, seed_cursor_at_log_end
from support.kernel_tree import KernelTree

from oomwatch.lab import kubelet_layout, provoke_kill

MIB = 1 << 20
CONTAINER_ID = "5e1f" * 16

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.host_only(
        "an agent and two report runs (tens of seconds emulated); the lab VM runs v2's stored "
        "kill (tests/kernel/test_agent.py) and sampled window (test_watcher.py), and "
        "`report --store` reads only the store"
    ),
]


def test_daemon_store_to_report(  # type: ignore[no-untyped-def]
    report, kernel_tree: KernelTree, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    scratch = kernel_tree.scratch
    state = tmp_path / "state"
    seed_cursor_at_log_end(state)  # the ring's earlier kills are not this test's
    daemon = start_daemon("--sample-interval-s", "0.25")
    try:
        pod_uid = str(uuid.uuid4())
        container = kubelet_layout(
            scratch, pod_uid, CONTAINER_ID, qos="burstable", container_limit_bytes=64 * MIB
        )
        # the watcher has found the new container and sampled it: its memory gauge is out
        label = f'pod_uid="{pod_uid}"'

        def sampled() -> bool:
            return any(
                line.startswith("oomwatch_container_memory_usage_bytes{") and label in line
                for line in daemon.metrics().splitlines()
            )

        assert wait_for(sampled, 30.0, 0.1), "the agent never sampled the new container"
        capture = provoke_kill(
            container, mode="anon", mb=120, step_mb=8, step_interval_s=0.25, comm="grower"
        )

        def reported() -> list[dict] | None:  # type: ignore[type-arg]
            run = report("--store", str(state), "--json", "--pod", pod_uid)
            if run.rc != 0:
                return None
            incidents = run.json()["incidents"]
            return [
                i for i in incidents if any(v["pid"] == capture.hog.pid for v in i["victims"])
            ] or None

        ours = until("the kill in `oomwatch report`", reported, 30.0, interval_s=0.5)
    finally:
        daemon.stop()
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
