"""Real kernel OOM kills in scratch memcgs: each scenario yields its finding, and no other
finding of the diagnosis fires on it.

Kills are provoked through `oomwatch.lab` (small limits, cleanup always) and decoded from what
the kernel printed to /dev/kmsg; our incidents are picked by our own victim pids because other
engineers provoke kills on the same machine.
"""

from __future__ import annotations

import json
import uuid

import pytest

from oomwatch.cgroup_identity import annotate
from oomwatch.cli import main as cli_main
from oomwatch.diagnosis import diagnose
from oomwatch.incident import Incident
from oomwatch.lab import (
    KillCapture,
    ScratchMemcg,
    kubelet_layout,
    provoke_kill,
    spawn_hog,
    thp_unavailable_reason,
)

MIB = 1 << 20
CONTAINER_ID = "d1a9" * 16

pytestmark = pytest.mark.kernel


def _full(capture: KillCapture) -> Incident:
    return diagnose(annotate(capture.full_incident()))


def _codes(incident: Incident) -> set[str]:
    return {f.code for f in incident.findings}


def test_thp(scratch: ScratchMemcg) -> None:
    reason = thp_unavailable_reason()
    if reason:
        pytest.skip(reason)
    memcg = scratch.create_child("thp", 96 * MIB)
    incident = _full(provoke_kill(memcg, mode="thp", mb=160, comm="thp-hog"))
    assert _codes(incident) == {"limit-cgroup", "thp-hidden"}
    thp = next(f for f in incident.findings if f.code == "thp-hidden")
    assert thp.evidence["thp_bytes"] >= 32 * MIB


def test_tmpfs(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("shm", 96 * MIB)
    incident = _full(provoke_kill(memcg, mode="tmpfs", mb=160, comm="shm-writer"))
    assert _codes(incident) == {"limit-cgroup", "tmpfs-shmem"}
    shm = next(f for f in incident.findings if f.code == "tmpfs-shmem")
    assert shm.evidence["shmem_bytes"] >= 48 * MIB


def test_overcommit_mapping(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("vm", 64 * MIB)
    capture = provoke_kill(
        memcg, mode="untouched-mapping", mb=100, reserve_mb=2048, comm="reserver"
    )
    incident = _full(capture)
    assert _codes(incident) == {"limit-cgroup", "overcommit-vm"}
    vm = next(f for f in incident.findings if f.code == "overcommit-vm")
    assert vm.evidence["total_vm_bytes"] >= 2048 << 20


def test_oom_score_adj_picks_the_smaller_process(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("adj", 128 * MIB)
    big = spawn_hog(memcg, mode="anon", mb=72, comm="big-keeper")
    assert big.wait_for("holding", 20.0) is not None
    capture = provoke_kill(memcg, mode="anon", mb=120, comm="small-adj", oom_score_adj=1000)
    incident = _full(capture)
    assert incident.victim is not None and incident.victim.comm == "small-adj"
    assert _codes(incident) == {"limit-cgroup", "score-adj-victim"}
    finding = next(f for f in incident.findings if f.code == "score-adj-victim")
    assert finding.evidence["largest_pid"] == big.pid
    assert big.poll() is None  # the larger process survived


def test_pod_level_limit(scratch: ScratchMemcg) -> None:
    container = kubelet_layout(
        scratch, str(uuid.uuid4()), CONTAINER_ID, qos="burstable", pod_limit_bytes=96 * MIB
    )
    incident = _full(provoke_kill(container, mode="anon", mb=160, comm="app"))
    assert incident.limit_scope == "pod"
    assert _codes(incident) == {"limit-pod"}
    assert incident.recommendation is not None
    assert incident.recommendation["memory_limit"] == "116Mi"  # 96 MiB + 20 %, rounded up


def test_child_kill_with_survivor_through_live_report(
    scratch: ScratchMemcg, capsys: pytest.CaptureFixture[str]
) -> None:
    """`oomwatch report` on the live kernel log sees the container still running."""
    pod_uid = str(uuid.uuid4())
    container = kubelet_layout(
        scratch, pod_uid, CONTAINER_ID, qos="burstable", container_limit_bytes=64 * MIB
    )
    capture = provoke_kill(container, mode="child-worker", mb=100, comm="worker", linger_s=60.0)
    [child] = capture.victim_pids
    assert capture.hog.poll() is None, "the parent (the container's main process) lives on"
    assert cli_main(["report", "--json", "--pod", pod_uid]) == 0
    doc = json.loads(capsys.readouterr().out)
    ours = [i for i in doc["incidents"] if any(v["pid"] == child for v in i["victims"])]
    assert len(ours) == 1
    [incident] = ours
    if incident["header_suppressed"]:
        pytest.skip("the kernel rate-limited this report (others' kills in the window)")
    assert incident["container_survived"] is True
    assert {f["code"] for f in incident["findings"]} == {"limit-container", "child-process-kill"}


def test_crash_loop(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("loop", 32 * MIB)
    capture = provoke_kill(memcg, mode="child-worker", mb=48, comm="crasher", children=3)
    incidents = [annotate(i) for i in capture.incidents()]
    assert len(incidents) == 3, capture.records
    last = diagnose(incidents[-1], history=incidents[:-1])
    codes = _codes(last)
    assert "crash-loop" in codes
    expected = (
        {"crash-loop", "limit-cgroup"}
        if not last.header_suppressed
        else {"crash-loop", "rate-limited-report"}
    )
    assert codes == expected
    assert next(f for f in last.findings if f.code == "crash-loop").evidence["kills_in_window"] == 3


@pytest.mark.slow
def test_rate_limited_burst(scratch: ScratchMemcg) -> None:
    memcg = scratch.create_child("burst", 32 * MIB)
    capture = provoke_kill(memcg, mode="child-worker", mb=48, comm="burst", children=15)
    incidents = [diagnose(annotate(i)) for i in capture.incidents()]
    assert len(incidents) == 15
    suppressed = [i for i in incidents if i.header_suppressed]
    assert len(suppressed) >= 5  # at most 10 full reports per 5 s
    for incident in suppressed:  # diagnosed alone (no history), so no crash-loop here
        assert _codes(incident) == {"rate-limited-report"}
    for incident in incidents:
        if not incident.header_suppressed:
            assert "rate-limited-report" not in _codes(incident)
