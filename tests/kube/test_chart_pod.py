"""The chart's rendered pod, run by a real container runtime, records a real OOM kill.

`helm template` renders the DaemonSet; its pod template is played by `podman kube play`
with the image `./dev.sh image` built (support.pod says what is left out and why: the
kube-rbac-proxy container, the service-account token, scheduling fields).  Then a process is
OOM-killed in a scratch kubelet-like memcg on this host, and what a user would look at must
show it: the agent container's log (`kubectl logs`), its metrics port, `oomwatch report
--store` run in the container (`kubectl exec`), its health endpoint.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest
from support import wait_for
from support.kernel_runs import metric_value
from support.kernel_tree import KernelTree
from support.pod import (
    ChartPod,
    chart_pod_manifest,
    image_build_failure,
    image_present,
    podman_unavailable_reason,
)
from support.render import helm_template

from oomwatch import __version__
from oomwatch.lab import kubelet_layout, spawn_hog, wait_rate_limit_window
from oomwatch.store import DB_NAME

pytestmark = [
    pytest.mark.image,
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.host_only(
        "podman and the image: the guest shares the host's root read-only, no container "
        "storage or network; the lab VM runs v2's kill through the agent "
        "(tests/kernel/test_agent.py)"
    ),
]
IMAGE = f"localhost/oomwatch:{__version__}"
MIB = 1 << 20


@pytest.fixture(scope="module")
def image() -> str:
    reason = podman_unavailable_reason()
    failure = image_build_failure() if reason is None else None
    if failure is not None:
        pytest.fail(failure)
    if reason is None and not image_present(IMAGE):
        reason = f"{IMAGE} is not in podman's storage: ./dev.sh image builds it"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return IMAGE


def test_the_rendered_pod_runs_and_records_a_real_kill(
    image: str, kernel_tree: KernelTree, tmp_path: Path
) -> None:
    scratch = kernel_tree.scratch
    docs = helm_template(sets=[f"image.repository={image.rsplit(':', 1)[0]}"])
    dirs = {"state": tmp_path / "state", "probe": tmp_path / "probe"}
    for path in dirs.values():
        path.mkdir()
    name = f"oomwatch-smoke-{uuid.uuid4().hex[:8]}"
    manifest = chart_pod_manifest(docs, name, dirs)
    with ChartPod(manifest, tmp_path) as pod:
        # The agent reads the whole kernel ring first (others' kills too): started, then on.
        pod.wait_line(lambda e: e.get("event") == "started", timeout_s=90)
        status, body = pod.get("agent", "http://127.0.0.1:9718/healthz")
        assert status == 200, body

        uid, cid = str(uuid.uuid4()), uuid.uuid4().hex * 2
        memcg = kubelet_layout(scratch, uid, cid, container_limit_bytes=32 * MIB)
        for attempt in range(2):
            wait_rate_limit_window()
            hog = spawn_hog(memcg, mode="anon", mb=128, comm="pod-smoke")
            assert hog.wait(20) == -signal.SIGKILL
            killed_at = time.monotonic()
            arrived, line = pod.wait_line(
                lambda e, pid=hog.pid: e.get("event") == "oom_kill" and e.get("process.pid") == pid,
                timeout_s=30,
            )
            if not line["header_suppressed"] or attempt == 1:
                break  # else someone else spent the report rate limit: once more, whole
        print(f"kill-to-log latency from the container: {(arrived - killed_at) * 1000:.0f} ms")
        assert line["k8s.pod.uid"] == uid and line["container.id"] == cid
        assert line["process.executable.name"] == "pod-smoke"
        assert line["limit_scope"] == "container" and line["limit_bytes"] == 32 * MIB

        def counted() -> bool:
            status, text = pod.get("agent", "http://127.0.0.1:9717/metrics")
            value = metric_value(text, "oomwatch_oom_kills_total", pod_uid=uid, scope="container")
            return status == 200 and value == 1.0

        assert wait_for(counted, 10.0, interval_s=0.5)

        report = pod.exec(
            "agent", "oomwatch", "report", "--store", "/var/lib/oomwatch", "--pod", uid
        )
        assert report.returncode == 0, report.stderr
        assert "pod-smoke" in report.stdout and str(hog.pid) in report.stdout, report.stdout

        # The securityContext was applied, not only rendered: non-root, no capabilities,
        # nothing written outside the volumes.
        status_lines = pod.exec("agent", "cat", "/proc/1/status").stdout.splitlines()
        fields = dict(line.split(":\t", 1) for line in status_lines if ":\t" in line)
        assert fields["Uid"].split()[:2] == ["65532", "65532"]
        assert int(fields["CapEff"], 16) == 0 and fields["NoNewPrivs"].strip() == "1"
        assert pod.exec("agent", "touch", "/opt/oomwatch/x").returncode != 0
        # the store on the node's state directory, written by the agent's user
        assert (dirs["state"] / DB_NAME).stat().st_uid == 65532
        rss = pod.exec("agent", "grep", "VmRSS", "/proc/1/status")
        print(f"agent in the container: {rss.stdout.strip()}")
        assert pod.state("agent") == "running" and pod.state("kmsg-relay") == "running"
