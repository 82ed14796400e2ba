"""Findings over time on real kernel kills: the cgroups engineer's `TimelineSampler` samples a
scratch memcg while a hog grows (a leak) or jumps (a spike), the timeline is frozen at the
kill's time as the daemon does, and diagnosis must name it — and nothing else from the list.
Both cgroup versions' hosts run it; the lab VM leaves it out (`TIMED_BY_DESIGN`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from support.kernel_tree import KernelTree

from oomwatch.cgroup_identity import annotate, identify
from oomwatch.cgroups import TimelineSampler
from oomwatch.cgroups.discovery import WatchedCgroup
from oomwatch.diagnosis import diagnose
from oomwatch.incident import Incident
from oomwatch.lab import KillCapture, Memcg, provoke_kill, spawn_hog
from oomwatch.lab.hierarchy import Version

MIB = 1 << 20
SAMPLE_INTERVAL_S = 0.2

# Each test waits out a growth in real time (40 s, 15 s here; several times that emulated).
TIMED_BY_DESIGN = (
    "real-time growth by design; the lab VM runs v2's sampled window "
    "(tests/kernel/test_watcher.py, growing window) and the findings are pure over it"
)
pytestmark = [pytest.mark.kernel, pytest.mark.slow, pytest.mark.host_only(TIMED_BY_DESIGN)]


@contextmanager
def _sampling(memcg: Memcg, version: Version) -> Iterator[TimelineSampler]:
    """Sample the memcg every 0.2 s in the background, as the daemon's sampler would."""
    cgroup = WatchedCgroup(memcg.relpath, str(memcg.fs_path), version, identify(memcg.relpath))
    sampler = TimelineSampler(interval_s=SAMPLE_INTERVAL_S, window_s=120.0)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            sampler.sample([cgroup], time.time())
            stop.wait(SAMPLE_INTERVAL_S)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield sampler
    finally:
        stop.set()
        thread.join()
        sampler.close()


def _with_timeline(capture: KillCapture, sampler: TimelineSampler, memcg: Memcg) -> Incident:
    [incident] = capture.incidents()
    if incident.header_suppressed:
        pytest.fail("the kernel rate-limited the report (others' kills in the window)")
    assert incident.kernel_time_s is not None
    boot_epoch_s = time.time() - time.monotonic()  # printk's clock is CLOCK_MONOTONIC-like
    incident.timeline = sampler.freeze(memcg.relpath, boot_epoch_s + incident.kernel_time_s)
    assert incident.timeline is not None and len(incident.timeline.samples) >= 10
    return diagnose(annotate(incident))


def test_steady_growth_is_a_leak_and_a_larger_limit_will_not_help(
    kernel_tree: KernelTree,
) -> None:
    memcg = kernel_tree.scratch.create_child("leak", 64 * MIB)
    with _sampling(memcg, kernel_tree.version) as sampler:
        capture = provoke_kill(
            memcg,
            mode="anon",
            mb=120,
            step_mb=1,
            step_interval_s=0.55,
            comm="leaky",
            timeout_s=90.0,
        )
        incident = _with_timeline(capture, sampler, memcg)
    assert {f.code for f in incident.findings} == {"limit-cgroup", "leak-trend"}
    leak = next(f for f in incident.findings if f.code == "leak-trend")
    assert 1.0 * MIB < leak.evidence["slope_bytes_per_second"] < 3.0 * MIB
    assert leak.evidence["window_seconds"] >= 30
    assert incident.recommendation is not None
    assert incident.recommendation["limit_will_not_help"] is True


def test_jump_before_the_kill_is_a_spike(kernel_tree: KernelTree) -> None:
    memcg = kernel_tree.scratch.create_child("spike", 96 * MIB)
    with _sampling(memcg, kernel_tree.version) as sampler:
        steady = spawn_hog(memcg, mode="anon", mb=24, comm="steady")
        assert steady.wait_for("holding", 20.0) is not None
        time.sleep(12.0)  # a flat baseline
        capture = provoke_kill(memcg, mode="anon", mb=200, comm="burst")
        incident = _with_timeline(capture, sampler, memcg)
    assert incident.victim is not None and incident.victim.comm == "burst"
    assert {f.code for f in incident.findings} == {"limit-cgroup", "spike"}
    spike = next(f for f in incident.findings if f.code == "spike")
    assert spike.evidence["jump_bytes"] >= 24 * MIB
    rec = incident.recommendation
    assert rec is not None and rec["limit_will_not_help"] is False
    assert rec["memory_request_bytes"] is not None  # median of the sampled (flat) usage
