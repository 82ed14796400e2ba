"""`oomwatch run` and `oomwatch demo` on a real cgroup v2 kernel: the agent end to end (JSON
line, metrics with the pod UID, store), group kills reconciled with memory.events, a kill -9
and restart in a burst -- the v2 twins of tests/daemon/test_run_kernel.py.

Emulation is slow, so latencies are printed, not held to the host's one second.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from support import wait_for
from support.agent import DaemonProcess, seed_cursor_at_log_end
from support.kernel_runs import incidents_for, kill_9_mid_burst_and_restart, metric_value
from support.store import stored

from oomwatch.lab import Memcg, ScratchMemcg, kubelet_layout, spawn_hog, wait_rate_limit_window

pytestmark = pytest.mark.kernel
MIB = 1 << 20
Start = Callable[..., DaemonProcess]


def container(
    scratch: ScratchMemcg, limit_mb: int | None = 32, pod_limit_mb: int | None = None
) -> tuple[Memcg, str, str]:
    uid, cid = str(uuid.uuid4()), uuid.uuid4().hex * 2
    memcg = kubelet_layout(
        scratch,
        uid,
        cid,
        driver="systemd",
        container_limit_bytes=limit_mb * MIB if limit_mb else None,
        pod_limit_bytes=pod_limit_mb * MIB if pod_limit_mb else None,
    )
    return memcg, uid, cid


def test_kill_reaches_log_metric_and_store_and_a_restart_adds_nothing(
    scratch_v2: ScratchMemcg, start_daemon: Start, tmp_path: Path
) -> None:
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    _, started = daemon.wait_line(lambda e: e.get("event") == "started")
    assert (started["cgroup_hierarchies"], started["cgroup_versions"]) == (["/sys/fs/cgroup"], [2])
    memcg, uid, cid = container(scratch_v2)
    wait_rate_limit_window()
    hog = spawn_hog(memcg, mode="anon", mb=128, comm="v2-kill")
    assert hog.wait(60) == -signal.SIGKILL
    killed_at = time.monotonic()
    arrived, line = daemon.wait_line(
        lambda e: e.get("event") == "oom_kill" and e.get("process.pid") == hog.pid, timeout_s=20
    )
    print(f"kill to JSON line: {arrived - killed_at:.2f} s (emulated)")
    assert line["k8s.pod.uid"] == uid and line["container.id"] == cid
    assert (line["process.executable.name"], line["limit_scope"]) == ("v2-kill", "container")
    assert line["limit_bytes"] == 32 * MIB and line["oom_group_enabled"] is False
    assert line["container_survived"] is False and line["kmsg_missing"] is False
    assert line["breakdown"]["anon_bytes"] > 16 * MIB  # from v2's `anon` stat

    def metric_seen() -> bool:
        return (
            metric_value(
                daemon.metrics(),
                "oomwatch_oom_kills_total",
                pod_uid=uid,
                kind="memcg",
                scope="container",
            )
            == 1.0
        )

    assert wait_for(metric_seen, 10.0)
    assert wait_for(lambda: len(incidents_for(daemon.state_dir, {hog.pid}, scratch_v2)) == 1, 10)
    assert daemon.stop() == 0

    again = start_daemon()  # same state dir, same boot: the cursor and counters resume
    time.sleep(4.0)  # longer than the reconciliation grace: a doubled kill would show
    assert not again.events(lambda e: e.get("event") == "oom_kill")
    assert len(incidents_for(again.state_dir, {hog.pid}, scratch_v2)) == 1
    assert again.stop() == 0


def test_group_kill_is_one_incident_and_its_counters_are_reconciled(
    scratch_v2: ScratchMemcg, start_daemon: Start, tmp_path: Path
) -> None:
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    memcg, uid, _ = container(scratch_v2)
    memcg.set_oom_group()
    peers = [spawn_hog(memcg, "idle", mb=4, comm=f"v2-peer{i}") for i in range(2)]
    for peer in peers:
        assert peer.wait_for("holding") == "holding"
    wait_rate_limit_window()
    hog = spawn_hog(memcg, mode="anon", mb=128, comm="v2-grower")
    assert hog.wait(60) == -signal.SIGKILL
    killed_at = time.monotonic()
    members = {hog.pid, *(p.pid for p in peers)}
    arrived, line = daemon.wait_line(
        lambda e: e.get("event") == "oom_kill" and e.get("k8s.pod.uid") == uid, timeout_s=20
    )
    # the report is complete after GROUP_KILL_IDLE_S of quiet: members' lines may follow
    print(f"group kill to JSON line: {arrived - killed_at:.2f} s (emulated)")
    assert line["group_kill"] is True and line["process.pid"] == hog.pid
    assert line["oom_group_enabled"] is True and set(line["victim_pids"]) == members
    time.sleep(5.0)  # past the grace: a counted kill no log line explained would show now
    everything = stored(daemon.state_dir)
    mine = [i for i in everything if i.pod_uid == uid]
    assert len(mine) == 1, [(i.kind, i.task_memcg, i.kmsg_missing, i.notes) for i in everything]
    [incident] = mine
    assert incident.group_kill and not incident.kmsg_missing
    assert {v.pid for v in incident.victims} == members
    lines = daemon.events(lambda e: e.get("event") == "oom_kill" and e.get("k8s.pod.uid") == uid)
    assert len(lines) == 1
    text = daemon.metrics()
    assert metric_value(text, "oomwatch_oom_kills_total", pod_uid=uid) == len(members)
    assert metric_value(text, "oomwatch_oom_incidents_total", pod_uid=uid) == 1.0
    assert metric_value(text, "oomwatch_group_oom_kills_total", pod_uid=uid) == 1.0
    assert memcg.events()["oom_group_kill"] == 1


def test_pod_limit_and_a_child_worker_killed_while_the_main_process_lives(
    scratch_v2: ScratchMemcg, start_daemon: Start, tmp_path: Path
) -> None:
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    memcg, uid, _ = container(scratch_v2, limit_mb=None, pod_limit_mb=48)
    wait_rate_limit_window()
    hog = spawn_hog(memcg, mode="child-worker", mb=128, comm="v2-worker", linger_s=10.0)
    hog.wait_for("child-exit", timeout_s=60)
    [child] = hog.child_pids
    _, line = daemon.wait_line(lambda e: e.get("process.pid") == child, timeout_s=20)
    assert line["k8s.pod.uid"] == uid and line["limit_scope"] == "pod"
    assert line["limit_bytes"] == 48 * MIB
    assert line["container_survived"] is True
    assert hog.poll() is None  # the main process is alive
    value = metric_value(daemon.metrics(), "oomwatch_child_process_oom_kills_total", pod_uid=uid)
    assert value == 1.0


def test_kill_9_mid_burst_and_restart_loses_and_doubles_nothing(
    scratch_v2: ScratchMemcg, start_daemon: Start, tmp_path: Path
) -> None:
    """A container made after the agent's last checkpoint once lost its kills to the QoS
    slice here (6.1): the kills while the agent was down must land in their pods."""
    kill_9_mid_burst_and_restart(
        scratch_v2,
        start_daemon,
        tmp_path / "state",
        container,
        memcgs=3,
        children=4,
        comm="v2-r",
        settle_s=30.0,
    )
