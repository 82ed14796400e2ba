"""`oomwatch report` on the live kernel log, on both cgroup versions (v1 here, v2 in the lab
VM): a real child-process kill is found by its pod, with the container still running."""

from __future__ import annotations

import json
import uuid

import pytest
from support.kernel_tree import KernelTree, node_findings

from oomwatch.cli import main as cli_main
from oomwatch.lab import kubelet_layout, provoke_kill

MIB = 1 << 20
CONTAINER_ID = "d1a9" * 16

pytestmark = pytest.mark.kernel


def test_child_killed_while_its_container_lives_through_the_live_report(
    kernel_tree: KernelTree, capsys: pytest.CaptureFixture[str]
) -> None:
    """`oomwatch report` on the live kernel log sees the container still running."""
    pod_uid = str(uuid.uuid4())
    container = kubelet_layout(
        kernel_tree.scratch, pod_uid, CONTAINER_ID, qos="burstable", container_limit_bytes=64 * MIB
    )
    capture = provoke_kill(container, mode="child-worker", mb=100, comm="worker", linger_s=60.0)
    [child] = capture.victim_pids
    assert capture.hog.poll() is None, "the parent (the container's main process) lives on"
    assert cli_main(["report", "--json", "--pod", pod_uid]) == 0
    doc = json.loads(capsys.readouterr().out)
    [incident] = [i for i in doc["incidents"] if any(v["pid"] == child for v in i["victims"])]
    if incident["header_suppressed"]:
        pytest.skip("the kernel rate-limited this report (others' kills in the window)")
    assert incident["container_survived"] is True
    codes = {f["code"] for f in incident["findings"]} - node_findings()
    assert codes == {"limit-container", "child-process-kill"}
