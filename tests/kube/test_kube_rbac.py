"""RBAC: the ClusterRoles grant exactly the (verb, group, resource) the agent sends.

Each test drives every feature once against the fake API server and compares the requests
it recorded with the manifests; `conftest.pytest_sessionfinish` also fails the run if any
kube test anywhere sent a request the roles do not grant.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from support.fakeapi import NODE, FakeApiServer, make_pod, running_status
from support.manifests import granted_verbs

from oomwatch.incident import Incident, Victim
from oomwatch.kube import KubeIntegration
from oomwatch.kube.oomincident import NODE_LABEL, Fingerprint
from oomwatch.kube.pods import decode_pod
from oomwatch.kube.summary import workload_name

CID = "f" * 64


@pytest.mark.parametrize("annotate", [False, True])
def test_cluster_role_grants_exactly_what_is_used(
    fake_api: FakeApiServer, api_client: client.ApiClient, annotate: bool
) -> None:
    pod = fake_api.put_pod(
        make_pod(statuses=[running_status(CID, image="app:1", imageID="app@sha256:" + "0" * 64)])
    )
    uid = pod["metadata"]["uid"]
    _seed_oomincidents(fake_api, pod)
    submitted: list[Incident] = []
    kube = KubeIntegration(
        NODE,
        incident_writer_options={"rate_per_s": 20.0, "burst": 5},
        annotate=annotate,
        submit=submitted.append,
        kernel_kills_for=lambda *_: 0,
        api_client=api_client,
        verify_delay_s=0.1,
        watch_timeout_s=5,
        backoff_max_s=0.4,
    )
    kube.start()
    try:
        for i in range(2):  # the second kill patches the Event's series
            incident = Incident(
                kind="memcg",
                kernel_time_s=float(i),
                pod_uid=uid,
                container_id=CID,
                limit_scope="container",
                victims=[Victim(pid=i + 1, comm="python")],
            )
            fake_api.wait_for(lambda _, inc=incident: kube.enricher.enrich(inc))
            kube.sink.emit(incident)
        finished = (datetime.now(UTC) + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        fake_api.put_pod(
            make_pod(
                uid=uid,
                statuses=[
                    {
                        "name": "app",
                        "containerID": "containerd://" + "e" * 64,
                        "restartCount": 1,
                        "image": "app:1",
                        "imageID": "app@sha256:" + "0" * 64,
                        "ready": True,
                        "state": {"running": {"startedAt": finished}},
                        "lastState": {
                            "terminated": {
                                "reason": "OOMKilled",
                                "exitCode": 137,
                                "containerID": f"containerd://{CID}",
                                "finishedAt": finished,
                            }
                        },
                    }
                ],
            )
        )
        fake_api.wait_for(lambda _: submitted)
        kube.sink.emit(submitted[0])
        # create, series patch, and the false-OOMKilled Event
        fake_api.wait_for(lambda api: len(api.event_writes) == 3)
        # the expired object collected; the seeded one found by its create, read and patched
        fake_api.wait_for(lambda api: ("delete", "expired") in api.oomincident_writes)
        fake_api.wait_for(lambda api: ("get", "oomwatch.io", "oomincidents") in api.seen())
        fake_api.wait_for(lambda api: ("patch", "oomwatch.io", "oomincidents") in api.seen())
        if annotate:
            fake_api.wait_for(lambda api: ("patch", "", "pods") in api.seen())
    finally:
        kube.stop(timeout_s=2)
    assert fake_api.seen() == granted_verbs(annotate=annotate)


def _seed_oomincidents(fake_api: FakeApiServer, pod: dict[str, Any]) -> None:
    """An expired object of this node (the agent deletes it) and the object the kills will
    name but without the node label (the agent's list misses it: its create finds it)."""
    info = decode_pod(pod)
    assert info is not None
    fingerprint = Fingerprint(
        info.namespace,
        workload_name(info.owner_kind, info.owner_name, info.name),
        "app",
        "undiagnosed",
        NODE,
    )
    base = {
        "apiVersion": "oomwatch.io/v1alpha1",
        "kind": "OOMIncident",
        "workload": "Pod/x",
        "container": "app",
        "node": NODE,
        "verdictCode": "undiagnosed",
        "verdict": "v",
        "kills": 1,
        "firstSeen": "2026-01-01T00:00:00Z",
        "lastSeen": "2026-01-01T00:00:00Z",
        "incident": {"kind": "memcg"},
    }
    with fake_api.lock:
        fake_api.oomincidents[("shop", "expired")] = {
            **base,
            "metadata": {"name": "expired", "namespace": "shop", "labels": {NODE_LABEL: NODE}},
        }
        name = fingerprint.object_name()
        fake_api.oomincidents[("shop", name)] = {
            **base,
            "metadata": {"name": name, "namespace": "shop"},
        }
