"""Incidents only the pod status shows: memory evictions and OOMKilled without a kernel kill."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import settled
from support.fakeapi import FakeApiServer, make_pod
from support.kube_scenario import (
    CID,
    POD_REF,
    UID,
    app_pod,
    event_for,
    wait,
)

from oomwatch.diagnosis import diagnose
from oomwatch.incident import (
    Incident,
)
from oomwatch.kube import KubeIntegration


def test_memory_eviction_becomes_an_incident(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    fake_api.put_pod(make_pod("batch-1", owner=("Job", "batch"), labels={}))
    submitted: list[Incident] = []
    kube = make_kube(submitted=submitted)
    wait(lambda: kube.cache.synced)
    message = (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available:"
        " 90Mi. Container app was using 900Mi, request is 128Mi, has larger consumption"
        " of memory. "
    )
    fake_api.put_pod(
        app_pod(status_extra={"phase": "Failed", "reason": "Evicted", "message": message})
    )
    fake_api.put_pod(
        make_pod(
            "batch-1",
            owner=("Job", "batch"),
            labels={},
            status_extra={
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: ephemeral-storage. ",
            },
        )
    )
    (incident,) = wait(lambda: submitted)
    assert incident.kind == "eviction" and incident.pod_uid == UID
    assert incident.k8s is not None and incident.k8s.pod == "web-7d4b9c8f6d-x2x9z"
    assert incident.findings[0].message.startswith(
        "Pod evicted by the kubelet for node memory pressure: The node was low on resource:"
    )
    # no incident follows for the ephemeral-storage eviction: they are not ours
    assert settled("the incidents submitted", lambda: len(submitted), 0.3, 10.0) == 1
    kube.sink.emit(incident)
    (body,) = event_for(fake_api)
    assert (body["reason"], body["action"]) == ("MemoryPressureEviction", "Evicted")
    assert body["regarding"] == {k: v for k, v in POD_REF.items() if k != "fieldPath"}


def oomkilled_status(finished: datetime, container_id: str = CID) -> list[dict[str, Any]]:
    stamp = finished.strftime("%Y-%m-%dT%H:%M:%SZ")
    started = (finished - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        {
            "name": "app",
            "containerID": "containerd://" + "e" * 64,
            "restartCount": 1,
            "state": {"running": {"startedAt": stamp}},
            "lastState": {
                "terminated": {
                    "reason": "OOMKilled",
                    "exitCode": 137,
                    "containerID": f"containerd://{container_id}",
                    "startedAt": started,
                    "finishedAt": stamp,
                }
            },
        }
    ]


@pytest.mark.parametrize("kernel_kills", [0, 1])
def test_oomkilled_without_a_kernel_kill_is_flagged(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration], kernel_kills: int
) -> None:
    fake_api.put_pod(app_pod())
    asked: list[tuple[str, float, float]] = []

    def kills(container_id: str, since_s: float, until_s: float) -> int:
        asked.append((container_id, since_s, until_s))
        return kernel_kills

    submitted: list[Incident] = []
    kube = make_kube(submitted=submitted, kills=kills)
    wait(lambda: kube.cache.synced)
    finished = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    fake_api.put_pod(app_pod(statuses=oomkilled_status(finished)))
    wait(lambda: asked)
    assert asked == [(CID, finished.timestamp() - 35.0, finished.timestamp() + 5.0)]
    if kernel_kills:  # the kernel's kill explains it: nothing is submitted
        assert settled("the incidents submitted", lambda: list(submitted), 0.3, 10.0) == []
        return
    (incident,) = wait(lambda: submitted)
    assert (incident.kind, incident.pod_uid, incident.container_id) == ("false_oomkilled", UID, CID)
    assert incident.k8s is not None and incident.k8s.container == "app"
    assert incident.findings[0].code == "false_oomkilled"
    kube.sink.emit(diagnose(incident))  # the pipeline diagnoses it, as every incident
    (body,) = event_for(fake_api)
    assert (body["reason"], body["action"]) == ("OOMKilledWithoutKernelKill", "Verified")
    assert body["note"].startswith(
        "Kubernetes shows pod shop/web-7d4b9c8f6d-x2x9z container app as OOMKilled"
    )
    assert " Findings: false-oomkilled. " in body["note"]


def test_oomkilled_from_before_the_agent_started_is_not_judged(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    old = datetime.now(UTC) - timedelta(hours=1)
    fake_api.put_pod(app_pod(statuses=oomkilled_status(old)))
    asked: list[str] = []

    def kills(cid: str, *_: object) -> int:
        asked.append(cid)
        return 0

    kube = make_kube(kills=kills)
    wait(lambda: kube.cache.synced)
    # the verifier does not ask about an old termination
    assert settled("what the verifier asked", lambda: list(asked), 0.5, 10.0) == []
