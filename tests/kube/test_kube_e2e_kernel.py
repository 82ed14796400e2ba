"""End to end on the real kernel: `oomwatch run` (not standalone) with the fake API server.

The fake API server knows a pod whose UID and container ID name a scratch kubelet-like memcg;
a real kill there must produce an Event on that pod, naming namespace, pod and container, and
a log line (`kubectl logs`) carrying the same Kubernetes identity.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import settled, wait_for
from support.agent import E2E_NODE as NODE
from support.agent import AgentProcess, connected_agent, started_and_watching
from support.fakeapi import FakeApiServer, make_pod, running_status
from support.kernel_tree import KernelTree

from oomwatch.lab import kubelet_layout, spawn_hog, wait_rate_limit_window

MiB = 2**20
# Each case starts an agent (and the relay) beside the fake API server: tens of seconds emulated.
AGENT_PER_CASE = (
    "an agent per case beside the fake API server; the lab VM runs v2's Event on the pod "
    "(tests/kernel/test_cluster.py) and the relay's kernel records (tests/kube/test_kube_relay.py)"
)


@pytest.fixture(params=["direct", "relay"])
def daemon(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    fake_api: FakeApiServer,
    kernel_tree: KernelTree,
) -> Iterator[AgentProcess]:
    """The agent reading /dev/kmsg itself, or (as in the DaemonSet) a FIFO fed by the relay."""
    relay: subprocess.Popen[bytes] | None = None
    extra: list[str] = []
    if request.param == "relay":
        fifo = tmp_path / "kmsg.fifo"
        relay = subprocess.Popen([sys.executable, "-m", "oomwatch.kmsg_relay", "--fifo", str(fifo)])
        wait_for(fifo.exists, 10.0, interval_s=0.05)
        extra = [f"--kmsg={fifo}"]
    agent = connected_agent(tmp_path, fake_api.url, extra)
    try:
        yield agent
    finally:
        agent.stop()
        if relay is not None:
            relay.terminate()
            relay.wait(10)


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.host_only(AGENT_PER_CASE)
def test_real_kill_produces_an_event_on_the_pod(
    fake_api: FakeApiServer, kernel_tree: KernelTree, daemon: AgentProcess
) -> None:
    scratch = kernel_tree.scratch
    pod_uid, container_id = str(uuid.uuid4()), uuid.uuid4().hex + uuid.uuid4().hex
    fake_api.put_pod(
        make_pod(
            "trainer-0",
            "ml",
            uid=pod_uid,
            node=NODE,
            owner=("Job", "trainer"),
            labels={},
            statuses=[running_status(container_id)],
        )
    )
    container = kubelet_layout(
        scratch, pod_uid, container_id, qos="burstable", container_limit_bytes=64 * MiB
    )
    started = started_and_watching(daemon, fake_api)
    assert started["standalone"] is False

    wait_rate_limit_window()
    hog = spawn_hog(container, mode="anon", mb=200, comm="e2e-hog")
    assert hog.wait(30) == -signal.SIGKILL

    def our_event(api: FakeApiServer) -> dict[str, Any] | None:
        return next((e for e in api.events.values() if e["regarding"].get("uid") == pod_uid), None)

    event = fake_api.wait_for(our_event, timeout_s=30)
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "trainer-0",
        "uid": pod_uid,
        "fieldPath": "spec.containers{app}",
    }
    assert event["reason"] in ("ContainerOOMKill", "ChildProcessOOMKilled")
    assert event["reportingInstance"] == f"oomwatch-{NODE}"
    assert "in pod ml/trainer-0" in event["note"]  # the container: regarding's fieldPath
    assert event["note"].endswith("kubectl oomwatch report pod/trainer-0 -n ml")  # the full report
    assert event["metadata"]["namespace"] == "ml"
    if "rate-limited-report" not in event["note"]:  # a whole report names the limit it hit
        assert "was killed at its container memory limit of 64 MiB" in event["note"]
        assert "e2e-hog" in event["note"] and " Advice: " in event["note"]
    _, line = daemon.wait_line(lambda ln: ln.get("k8s.pod.name") == "trainer-0", timeout_s=10)
    assert (line["event"], line["k8s.namespace.name"], line["k8s.container.name"]) == (
        "oom_kill",
        "ml",
        "app",
    )
    assert line["k8s.job.name"] == "trainer" and line["k8s.node.name"] == NODE
    assert line["message"] == event["note"].split(" Advice: ")[0].split(" Findings: ")[0]
    assert line["k8s.pod.uid"] == pod_uid and line["container.id"] == container_id


@pytest.fixture
def direct_daemon(
    tmp_path: Path, fake_api: FakeApiServer, kernel_tree: KernelTree
) -> Iterator[AgentProcess]:
    agent = connected_agent(tmp_path, fake_api.url, [])
    try:
        yield agent
    finally:
        agent.stop()


def _stamp(at_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at_s))


@pytest.mark.kernel
@pytest.mark.slow
@pytest.mark.host_only(AGENT_PER_CASE)
def test_oomkilled_status_is_checked_against_real_kernel_kills(
    fake_api: FakeApiServer, kernel_tree: KernelTree, direct_daemon: AgentProcess
) -> None:
    """`app` really was OOM-killed; `sidecar` is only *said* to be: only it is flagged."""
    scratch = kernel_tree.scratch
    pod_uid = str(uuid.uuid4())
    app_id, sidecar_id = uuid.uuid4().hex * 2, uuid.uuid4().hex * 2
    containers = [{"name": name, "image": "img:1"} for name in ("app", "sidecar")]

    def status(name: str, cid: str, terminated: dict[str, Any] | None) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": name,
            "containerID": f"containerd://{cid}",
            "restartCount": 0,
            "image": "img:1",
            "imageID": "img@sha256:" + "0" * 64,
            "ready": True,
            "state": {"running": {"startedAt": _stamp(time.time() - 60)}},
        }
        if terminated:
            entry.update(state={"terminated": terminated}, ready=False)
        return entry

    def pod(terminated: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        done = terminated or {}
        return make_pod(
            "trainer-1",
            "ml",
            uid=pod_uid,
            node=NODE,
            owner=("Job", "trainer"),
            labels={},
            containers=containers,
            statuses=[
                status("app", app_id, done.get("app")),
                status("sidecar", sidecar_id, done.get("sidecar")),
            ],
        )

    fake_api.put_pod(pod())
    memcg = kubelet_layout(scratch, pod_uid, app_id, container_limit_bytes=64 * MiB)
    direct_daemon.wait_line(lambda line: line.get("event") == "started", timeout_s=60)
    fake_api.wait_for(lambda api: ("watch", "", "pods") in api.seen(), timeout_s=30)
    started_s = time.time()
    wait_rate_limit_window()
    hog = spawn_hog(memcg, mode="anon", mb=200, comm="e2e-real")
    assert hog.wait(30) == -signal.SIGKILL
    fake_api.wait_for(
        lambda api: any(e["reason"] == "ContainerOOMKill" for e in api.events.values()),
        timeout_s=30,
    )

    def oomkilled(cid: str) -> dict[str, Any]:
        return {
            "reason": "OOMKilled",
            "exitCode": 137,
            "containerID": f"containerd://{cid}",
            "startedAt": _stamp(started_s - 30),
            "finishedAt": _stamp(time.time()),
        }

    fake_api.put_pod(pod({"app": oomkilled(app_id), "sidecar": oomkilled(sidecar_id)}))
    # The agent waits 15 s (so the kernel kill is stored first), then asks the store.
    flagged = fake_api.wait_for(
        lambda api: [e for e in api.events.values() if e["reason"] == "OOMKilledWithoutKernelKill"],
        timeout_s=40,
    )
    # one only: the app container's claim is explained by its kernel kill
    flagged = settled(
        "the OOMKilledWithoutKernelKill Events",
        lambda: [
            e for e in fake_api.events.values() if e["reason"] == "OOMKilledWithoutKernelKill"
        ],
        1.0,
        30.0,
    )
    assert len(flagged) == 1
    assert flagged[0]["regarding"]["fieldPath"] == "spec.containers{sidecar}"
    assert flagged[0]["note"].startswith(
        "Kubernetes shows pod ml/trainer-1 container sidecar as OOMKilled"
    )
