"""`oomwatch run` against the real kernel: kills in scratch kubelet-like memcgs.

Each test starts the agent as a subprocess (standalone, temp state dir, free port) and
provokes real OOM kills; other engineers kill processes on this machine too, so every
assertion filters by this test's own pod UIDs, cgroups and pids.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support import wait_for
from support.agent import DaemonProcess, seed_cursor_at_log_end, victim_is
from support.kernel_runs import (
    MIB,
    burst,
    container,
    incidents_for,
    kill_9_mid_burst_and_restart,
    metric_value,
)
from support.store import settled_incidents, stored

from oomwatch.incident import Incident
from oomwatch.lab import (
    ScratchMemcg,
    spawn_hog,
    wait_rate_limit_window,
)

pytestmark = [pytest.mark.kernel]


def test_kill_reaches_log_metric_and_store_within_a_second(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    memcg, uid, cid = container(scratch)
    for attempt in range(2):
        wait_rate_limit_window()
        hog = spawn_hog(memcg, mode="anon", mb=128, comm="h4-kill")
        assert hog.wait(20) == -signal.SIGKILL
        killed_at = time.monotonic()
        arrived, line = daemon.wait_line(victim_is(hog.pid), timeout_s=5.0)
        if not line["header_suppressed"] or attempt == 1:
            break
        time.sleep(6)  # someone else used the report rate limit: once more for a full report
    assert arrived - killed_at <= 1.0
    assert line["k8s.pod.uid"] == uid and line["container.id"] == cid
    assert line["process.executable.name"] == "h4-kill" and line["limit_scope"] == "container"
    assert line["limit_bytes"] == 32 * MIB and line["usage_bytes"] is not None
    assert line["container_survived"] is False and line["kmsg_missing"] is False
    assert line["breakdown"]["anon_bytes"] > 16 * MIB

    def metric_seen() -> bool:
        value = metric_value(
            daemon.metrics(),
            "oomwatch_oom_kills_total",
            pod_uid=uid,
            kind="memcg",
            scope="container",
        )
        return value == 1.0

    def store_seen() -> bool:
        return any(
            i.victim and i.victim.pid == hog.pid and i.pod_uid == uid
            for i in stored(daemon.state_dir)
        )

    assert wait_for(metric_seen, max(0.0, killed_at + 1.0 - time.monotonic()))
    assert wait_for(store_seen, max(0.0, killed_at + 1.0 - time.monotonic()))
    assert daemon.healthz() == 200
    assert daemon.stop() == 0
    assert daemon.events(lambda e: e.get("event") == "stopped")


def test_backlog_is_decoded_on_first_start(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess]
) -> None:
    memcg, uid, _ = container(scratch)
    hog = spawn_hog(memcg, mode="anon", mb=128, comm="h4-before")
    assert hog.wait(20) == -signal.SIGKILL
    daemon = start_daemon()  # no cursor yet: the whole ring is read once
    _, line = daemon.wait_line(lambda e: e.get("process.pid") == hog.pid, timeout_s=30.0)
    assert line["k8s.pod.uid"] == uid
    daemon.stop()
    again = start_daemon()  # with the cursor: nothing is stored twice
    time.sleep(1.0)
    again.stop()
    mine = [i for i in stored(daemon.state_dir) if i.victim and i.victim.pid == hog.pid]
    assert len(mine) == 1
    assert not again.events(lambda e: e.get("process.pid") == hog.pid)


def test_child_worker_killed_while_main_process_survives(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    memcg, uid, _ = container(scratch)
    wait_rate_limit_window()
    hog = spawn_hog(memcg, mode="child-worker", mb=128, comm="h4-worker", linger_s=3.0)
    hog.wait_for("child-exit", timeout_s=20)
    [child] = hog.child_pids
    _, line = daemon.wait_line(lambda e: e.get("process.pid") == child, timeout_s=5.0)
    assert line["container_survived"] is True and line["k8s.pod.uid"] == uid
    assert hog.poll() is None  # the main process is alive
    value = metric_value(daemon.metrics(), "oomwatch_child_process_oom_kills_total", pod_uid=uid)
    assert value == 1.0


def test_burst_of_twenty_across_four_memcgs_is_recorded_exactly_once(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    made = [container(scratch) for _ in range(4)]
    memcgs = [m for m, _, _ in made]
    uid_of = {m.relpath: uid for m, uid, _ in made}
    pids = burst(memcgs, 5)
    assert len(set(pids)) == 20
    assert [m.oom_kill_count() for m in memcgs] == [5, 5, 5, 5]
    mine: list[Incident] = []

    def all_in() -> bool:
        mine[:] = incidents_for(daemon.state_dir, set(pids), scratch)
        return len(mine) >= 20

    assert wait_for(all_in, 10.0), f"{len(mine)} of 20 incidents"
    # nothing more may come: no duplicates, no spurious kmsg_missing
    mine = settled_incidents(lambda: incidents_for(daemon.state_dir, set(pids), scratch))
    assert len(mine) == 20
    per_memcg = {m.relpath: sum(1 for i in mine if i.task_memcg == m.relpath) for m in memcgs}
    assert per_memcg == {m.relpath: 5 for m in memcgs}
    assert all(i.task_memcg and i.pod_uid == uid_of[i.task_memcg] for i in mine)
    # the kernel prints 10 full reports per 5 s: the rest of a 20-kill burst has no header
    suppressed = [i for i in mine if i.header_suppressed]
    print(f"burst: {len(suppressed)} of 20 kills had no report header")
    assert suppressed and all(i.pod_uid and i.victim for i in suppressed)


def test_kill_9_mid_burst_and_restart_loses_and_doubles_nothing(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    kill_9_mid_burst_and_restart(scratch, start_daemon, tmp_path / "state", container)


def _overrun_ring(total_bytes: int) -> int:
    """Write userspace records (facility LOG_USER) until `total_bytes` went into the ring.

    /dev/kmsg rate-limits writers per open file (10 records / 5 s), so reopen every 10.
    """
    text = b"<14>oomwatch-test overrun " + b"x" * 900 + b"\n"
    written = 0
    records = 0
    while written < total_bytes:
        fd = os.open("/dev/kmsg", os.O_WRONLY)
        try:
            for _ in range(10):
                os.write(fd, text)
                written += len(text)
                records += 1
        finally:
            os.close(fd)
    return records


def test_sigstop_overrun_counts_lost_records_and_stays_healthy(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    import ctypes

    ring_bytes = int(ctypes.CDLL(None).klogctl(10, None, 0))  # SYSLOG_ACTION_SIZE_BUFFER
    assert ring_bytes > 0
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    daemon.signal(signal.SIGSTOP)
    try:
        _overrun_ring(ring_bytes * 2)
    finally:
        daemon.signal(signal.SIGCONT)
    _, lost = daemon.wait_line(lambda e: e.get("event") == "kmsg_records_lost", timeout_s=5.0)
    assert lost["records"] > 0
    value = metric_value(daemon.metrics(), "oomwatch_kmsg_records_lost_total")
    assert value is not None and value >= lost["records"]
    assert daemon.healthz() == 200
    # and it still records kills
    memcg, uid, _ = container(scratch)
    wait_rate_limit_window()
    hog = spawn_hog(memcg, mode="anon", mb=128, comm="h4-after")
    assert hog.wait(20) == -signal.SIGKILL
    _, line = daemon.wait_line(lambda e: e.get("process.pid") == hog.pid, timeout_s=5.0)
    assert line["k8s.pod.uid"] == uid


def test_hostile_process_name_is_escaped_and_cannot_forge_identity(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    memcg, uid, cid = container(scratch)
    evil = 'x\n{"pod_uid":1'  # 15 bytes: the kernel keeps all of it
    wait_rate_limit_window()
    hog = spawn_hog(memcg, mode="anon", mb=128, comm=evil)
    assert hog.wait(20) == -signal.SIGKILL
    _, line = daemon.wait_line(lambda e: e.get("process.pid") == hog.pid, timeout_s=5.0)
    assert line["k8s.pod.uid"] == uid and line["container.id"] == cid
    comm = line["process.executable.name"]
    assert "\n" not in comm and comm.startswith("x\\")
    raw_lines = [e for _, e in daemon.events(lambda e: e.get("process.pid") == hog.pid)]
    assert len(raw_lines) == 1  # one JSON object, no forged second line
    assert "x\\" not in daemon.metrics()  # process names never become label values


# PID 1 of a pid namespace (a container's entrypoint) with idle peers; it joins the memcg
# itself so the `unshare` parent stays outside.  Killing it makes the kernel kill the peers.
PID_1_SCRIPT = """
import mmap, os, sys, time
with open(sys.argv[1], "w") as procs:
    procs.write("0")
with open("/proc/self/comm", "w") as comm:
    comm.write("h4-pid1")
for _ in range(3):
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "60"])
time.sleep(0.3)
region = mmap.mmap(-1, 128 << 20)
for offset in range(0, len(region), 4096):
    region[offset] = 1
time.sleep(60)
"""


def test_pid_1_killed_takes_its_namespace_down_so_the_container_did_not_survive(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux unshare to make a pid namespace")
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    memcg, uid, _ = container(scratch)
    wait_rate_limit_window()
    proc = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            sys.executable,
            "-c",
            PID_1_SCRIPT,
            str(memcg.fs_path / "cgroup.procs"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    scratch.track_process(proc)
    _, line = daemon.wait_line(
        lambda e: e.get("event") == "oom_kill" and e.get("k8s.pod.uid") == uid, timeout_s=20.0
    )
    assert line["process.executable.name"] == "h4-pid1"
    assert line["container_survived"] is False  # the sleeps were killed with their PID 1
    assert proc.wait(10) is not None
