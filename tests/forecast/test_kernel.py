"""The pre-OOM warning on the real kernel, kept short (bench/forecast.py measures at length):
the v1 pressure_level eventfds report failing reclaim before a kill, a PSI trigger on a cgroup2
memory.pressure file fires under thrash (a v2 host's own container's), and `oomwatch run`
warns of a real leak in a kubelet-laid-out container before the kernel kills it (log line,
gauge, store, the kill joined with its lead time) while a sawtooth and a container whose page
cache fills its limit, beside it, get no warning."""

from __future__ import annotations

import re
import secrets
import time
import uuid
from pathlib import Path

import pytest
from support import until
from support.agent import DaemonProcess, seed_cursor_at_log_end
from support.kernel_tree import KernelTree
from support.store import stored, wait_stored

from oomwatch.cgroups.pressure import NODE_PSI, PressureWatch
from oomwatch.lab import ScratchMemcg, kubelet_layout, spawn_hog
from oomwatch.store import IncidentStore

pytestmark = [pytest.mark.kernel, pytest.mark.slow]
MIB = 1 << 20


def test_pressure_level_reports_failing_reclaim_before_the_kill(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("pressed", 48 * MIB)
    watch = PressureWatch(NODE_PSI)
    try:
        watch.watch(memcg.relpath, str(memcg.fs_path), 1, time.monotonic())
        assert watch.failure is None
        hog = spawn_hog(memcg, mode="anon", mb=128, step_mb=4, step_interval_s=0.02)
        hog.wait(timeout=30)
        watch.poll(time.monotonic())
        pressure = watch.pressure(memcg.relpath)
    finally:
        watch.close()
    assert hog.returncode == -9
    assert pressure.critical >= 1 and pressure.medium >= pressure.critical
    assert pressure.reclaim_failing and pressure.reported
    assert pressure.node_some_avg10 is not None  # /proc/pressure/memory read


@pytest.mark.host_only(
    "the leak grows for ~150 s by design; the lab VM runs v2's sampled growth "
    "(tests/kernel/test_watcher.py), and the warning is pure over it"
)
def test_a_real_leak_is_warned_before_its_kill(kernel_tree: KernelTree, tmp_path: Path) -> None:
    scratch = kernel_tree.scratch
    pod_uid = str(uuid.uuid4())
    leak = kubelet_layout(scratch, pod_uid, secrets.token_hex(32), container_limit_bytes=64 * MIB)
    saw = scratch.create_child("saw", 48 * MIB)
    cache = scratch.create_child("cache", 40 * MIB)
    state = tmp_path / "state"
    seed_cursor_at_log_end(state)
    daemon = DaemonProcess(state)
    try:
        spawn_hog(saw, mode="sawtooth", mb=8, cycle_mb=24, rise_s=20.0, comm="saw")
        spawn_hog(cache, mode="cache", mb=24, cycle_mb=40, rest_s=1.0, comm="cache")
        hog = spawn_hog(leak, mode="anon", mb=400, step_mb=1, step_interval_s=2.5, comm="leaky")
        _, warned = daemon.wait_line(
            lambda e: e.get("event") == "memory_limit_approaching", timeout_s=150
        )
        warned_at = time.monotonic()
        gauge = re.search(
            rf'oomwatch_container_seconds_to_oom\{{[^}}]*pod_uid="{pod_uid}"'
            r"[^}]*\} ([0-9.]+)",
            daemon.metrics(),
        )
        hog.wait(timeout=200)
        lead_s = time.monotonic() - warned_at
        # the kill is stored with its warning joined (others' kills are stored too)
        wait_stored(state, lambda i: i.task_memcg == leak.relpath and i.forecast is not None)
    finally:
        daemon.stop()
    assert hog.returncode == -9
    assert warned["cgroup"] == leak.relpath and warned["pod_uid"] == pod_uid
    assert gauge is not None, "no seconds-to-OOM gauge while the warning was in force"
    assert 0.5 * lead_s <= warned["seconds_to_oom"] <= 1.6 * lead_s, (warned, lead_s)
    assert lead_s >= 30
    [kill] = [i for i in stored(state) if i.task_memcg == leak.relpath]  # others' kills too
    assert kill.forecast is not None and kill.forecast.predicted
    assert kill.forecast.lead_time_seconds is not None
    assert abs(kill.forecast.lead_time_seconds - lead_s) < 5
    store = IncidentStore.open_readonly(state)
    try:  # the agent watches the whole machine: other test runs' cgroups are not ours
        warnings = [w for w in store.warnings() if w.cgroup.startswith(scratch.relpath)]
    finally:
        store.close()
    assert [w.cgroup for w in warnings] == [leak.relpath], "the steady neighbours were warned of"
    assert warnings[0].outcome == "killed"


@pytest.mark.host_only(
    "page cache needs a writable disk and the guest has none (its root is the host's, "
    "read-only; tmpfs is shared memory); the trigger is on a cgroup2 memory.pressure file "
    "either way, the unified root's on this v1 host"
)
def test_a_psi_trigger_on_a_cgroup2_memory_pressure_file_fires_under_thrash(
    kernel_tree: KernelTree,
) -> None:
    """A trigger is created on the memory.pressure file that sees a thrashing memcg (its own
    on v2; on v1 the unified root's, `KernelTree.psi_cgroup`), and fires while the memcg's
    page cache thrashes."""
    thrash = kernel_tree.scratch.create_child("thrash", 24 * MIB)
    relpath, directory = kernel_tree.psi_cgroup(thrash)
    if not (directory / "memory.pressure").exists():
        pytest.skip(f"no {directory}/memory.pressure (PSI off, or no unified hierarchy)")
    watch = PressureWatch(NODE_PSI)
    try:
        watch.watch(relpath, str(directory), 2, time.monotonic())
        assert watch.trigger_failure is None
        spawn_hog(thrash, mode="cache", mb=8, cycle_mb=64, rest_s=0.0, comm="thrash")

        def fired() -> bool | None:
            watch.poll(time.monotonic())
            return watch.pressure(relpath).psi_events > 0 or None

        until(f"a PSI trigger event on {directory}", fired, 30.0, interval_s=0.5)
        pressure = watch.pressure(relpath)
    finally:
        watch.close()
    assert pressure.psi_events >= 1 and pressure.reported
    assert pressure.some_avg10 is not None and pressure.full_avg10 is not None
