"""A probe file's claimed pod reaches the API only where the API backs it.

The attack: a file (owner: nobody) claiming another namespace's pod UID, or only its
cgroup: a CUDAOutOfMemory Event landed on that pod with the attacker's text in the note, and
the annotation with --annotate-pods.  The owner uid is no better: any pod may run
as the uid the claimed container runs as.  Now only an enforced per-pod directory vouches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from support.fakeapi import FakeApiServer
from support.kube_scenario import CID, UID, app_pod, drained, wait

from oomwatch.incident import Incident
from oomwatch.kube import KubeIntegration
from oomwatch.probe.join import framework_incident
from oomwatch.probe.reader import FlightRecord
from oomwatch.probe.schema import FrameworkOomEvent, ProbeMeta

EVENT = FrameworkOomEvent(
    wall_s=1_700_000_000.0,
    mono_s=50.0,
    framework="torch-cuda",
    message="CUDA out of memory.",
    phase="ATTACKER-TEXT",
)


def incident_from(owner_uid: int, *, pod_dir: str | None = None, **claims: Any) -> Incident:
    meta = ProbeMeta(pid=7, comm="python", started_wall_s=1.0, started_mono_s=1.0, **claims)
    record = FlightRecord(
        name="f.ring",
        meta=meta,
        samples=(),
        events=(EVENT,),
        mtime_s=1.0,
        owner_uid=owner_uid,
        pod_dir=pod_dir,
    )
    return framework_incident(record, EVENT, 1_700_000_001.0, pod_dirs=pod_dir is not None)


def pod_running_as(uid: int | None, **spec: Any) -> dict[str, Any]:
    pod = app_pod()
    if uid is not None:
        pod["spec"]["containers"][0]["securityContext"] = {"runAsUser": uid}
    pod["spec"].update(spec)
    return pod


def sent(kube: KubeIntegration, fake_api: FakeApiServer) -> tuple[int, bool]:
    """(Events created, whether the pod was annotated) once the publisher is idle."""
    drained(kube)
    with fake_api.lock:
        events = [b for op, b in fake_api.event_writes if op == "create"]
        pod = fake_api.pods.get(("shop", "web-7d4b9c8f6d-x2x9z"), {"metadata": {}})
        annotations = pod["metadata"].get("annotations") or {}
    return len(events), "oomwatch.io/last-oom-kill" in annotations


CLAIM = {
    "pod_uid": UID,
    "namespace": "shop",
    "pod_name": "web-7d4b9c8f6d-x2x9z",
    "container": "app",
}


@pytest.mark.parametrize(
    ("owner", "run_as", "spec", "claims"),
    [
        (65534, 1000, {}, CLAIM),  # another user's file
        (0, 0, {}, CLAIM),  # root owns what every root pod writes
        (1000, None, {}, CLAIM),  # the API fixes no uid for the container
        (1000, 1000, {"hostUsers": False}, CLAIM),  # user namespace: host uid unknown
        (1000, 1000, {}, {**CLAIM, "container": "sidecar"}),  # no such container
        (65534, 1000, {}, {"cgroup": f"/kubepods/burstable/pod{UID}/{CID}"}),  # its cgroup only
    ],
)
def test_an_unbacked_claim_sends_nothing(
    fake_api: FakeApiServer,
    make_kube: Callable[..., KubeIntegration],
    owner: int,
    run_as: int | None,
    spec: dict[str, Any],
    claims: dict[str, Any],
) -> None:
    fake_api.put_pod(pod_running_as(run_as, **spec))
    kube = make_kube(annotate=True)
    wait(lambda: kube.cache.synced)
    incident = incident_from(owner, **claims)
    assert kube.enricher.enrich(incident)
    assert incident.pod_uid is None and incident.k8s is None and incident.container_id is None
    assert incident.allocator is not None and incident.allocator["identity"] == "unverified"
    kube.sink.emit(incident)
    assert sent(kube, fake_api) == (0, False)


def test_uid_1000_claiming_another_namespaces_pod_that_runs_as_1000_sends_nothing(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    """An owner that matches the claimed container's runAsUser vouches for nothing (any pod
    may run as 1000): no Event goes out on that pod with the attacker's numbers."""
    fake_api.put_pod(pod_running_as(1000))
    kube = make_kube(annotate=True)
    wait(lambda: kube.cache.synced)
    incident = incident_from(1000, **CLAIM)
    assert kube.enricher.enrich(incident)
    assert incident.pod_uid is None and incident.k8s is None
    assert incident.allocator is not None and incident.allocator["identity"] == "unverified"
    kube.sink.emit(incident)
    assert sent(kube, fake_api) == (0, False)


def test_a_vouched_pod_the_api_has_not_shown_is_waited_for_and_sent_nothing(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    kube = make_kube(annotate=True)
    wait(lambda: kube.cache.synced)
    incident = incident_from(0, pod_dir=UID, container="app")
    assert kube.enricher.enrich(incident) is False  # "not yet": the pipeline's wait ends it
    assert incident.container_id is None
    kube.sink.emit(incident)
    assert sent(kube, fake_api) == (0, False)


def test_a_per_pod_directory_names_the_pod_and_the_container_by_the_api(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(pod_running_as(None))  # no runAsUser needed: the directory vouches
    kube = make_kube()
    incident = incident_from(0, pod_dir=UID, container="app")
    wait(lambda: kube.enricher.enrich(incident))
    assert (incident.pod_uid, incident.container_id) == (UID, CID)
    assert incident.allocator is not None and incident.allocator["identity"] == "pod_dir"
    kube.sink.emit(incident)
    assert sent(kube, fake_api)[0] == 1
