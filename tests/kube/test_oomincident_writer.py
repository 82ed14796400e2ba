"""The agent writes `OOMIncident`s through the fake API server (which checks each against the
CRD's schema): a storm is one object and a few writes, counts go on across a restart, old
objects are collected, and a cluster without the CRD is told once and keeps its Events."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from support import settled
from support.fakeapi import NODE, FakeApiServer, make_pod, running_status

from oomwatch.diagnosis.history import History
from oomwatch.incident import Incident, MemcgUsage, PodContext, Victim
from oomwatch.kube import KubeIntegration
from oomwatch.kube.oomincident import FIELD_MANAGER, NODE_LABEL

CID = "c" * 64
FAST = {"rate_per_s": 2.0, "burst": 2, "gc_interval_s": 3600.0}


def _pod(fake_api: FakeApiServer) -> str:
    pod = fake_api.put_pod(
        make_pod(statuses=[running_status(CID, image="app:1", imageID="app@sha256:" + "0" * 64)])
    )
    return str(pod["metadata"]["uid"])


def _kills(uid: str, count: int) -> list[Incident]:
    history = History()
    out = []
    for i in range(count):
        incident = Incident(
            kind="memcg",
            limit_scope="container",
            kernel_time_s=float(i),
            pod_uid=uid,
            container_id=CID,
            wall_time=f"2026-11-26T10:{i // 60:02d}:{i % 60:02d}+00:00",
            memcg=MemcgUsage(usage_bytes=256 << 20, limit_bytes=256 << 20),
            victims=[Victim(pid=100 + i, comm="python", anon_rss_bytes=250 << 20)],
            k8s=PodContext(namespace="shop", pod="web-7d4b9c8f6d-x2x9z", container="app"),
        )
        out.append(history.diagnose(incident))
        history.remember(out[-1])
    return out


def _emit_all(fake_api: FakeApiServer, kube: KubeIntegration, kills: list[Incident]) -> None:
    fake_api.wait_for(lambda _: kube.enricher.enrich(kills[0]))
    for incident in kills:
        kube.sink.emit(incident)


def test_a_storm_of_60_kills_is_one_object_counting_60_in_a_few_writes(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    uid = _pod(fake_api)
    kube = make_kube(incident_writer_options=FAST)
    started = time.monotonic()
    _emit_all(fake_api, kube, _kills(uid, 60))
    fake_api.wait_for(
        lambda api: any(o["kills"] == 60 for o in api.oomincidents.values()), timeout_s=20
    )
    elapsed_s = time.monotonic() - started
    assert len(fake_api.oomincidents) == 1
    (obj,) = fake_api.oomincidents.values()
    assert obj["metadata"]["namespace"] == "shop"
    assert obj["workload"] == "Deployment/web" and obj["container"] == "app"
    assert obj["node"] == NODE and obj["limit"] == "256Mi"
    assert obj["firstSeen"].startswith("2026-11-26T10:00:00")
    assert obj["lastSeen"].startswith("2026-11-26T10:00:59")
    assert "crash-loop" in [f["code"] for f in obj["incident"]["findings"]]
    assert [m["manager"] for m in obj["metadata"]["managedFields"]] == [FIELD_MANAGER]
    # The token bucket: a burst of 2, then 2 a second.
    bound = 2 + 2 * elapsed_s + 1
    writes = [w for w in fake_api.oomincident_writes if w[0] != "delete"]
    assert writes[0][0] == "create" and len(writes) <= bound, (writes, elapsed_s)
    assert len(fake_api.event_writes) >= 2  # the Events went on beside them


def test_a_restarted_agent_goes_on_counting_and_collects_expired_objects(
    fake_api: FakeApiServer,
    api_client: client.ApiClient,
    make_kube: Callable[..., KubeIntegration],
) -> None:
    uid = _pod(fake_api)
    first = make_kube(incident_writer_options=FAST)
    _emit_all(fake_api, first, _kills(uid, 3))
    fake_api.wait_for(lambda api: any(o["kills"] == 3 for o in api.oomincidents.values()))
    first.stop(timeout_s=2)
    old = dict(next(iter(fake_api.oomincidents.values())))
    expired = {
        **old,
        "metadata": {**old["metadata"], "name": "old-one"},
        "workload": "Deployment/old",
        "lastSeen": "2026-01-01T00:00:00Z",
    }
    elsewhere = {
        **expired,
        "metadata": {**expired["metadata"], "name": "other-node", "labels": {NODE_LABEL: "node-b"}},
        "node": "node-b",
    }
    with fake_api.lock:
        fake_api.oomincidents[("shop", "old-one")] = expired
        fake_api.oomincidents[("shop", "other-node")] = elsewhere
    second = make_kube(incident_writer_options=FAST)
    _emit_all(fake_api, second, _kills(uid, 2))
    fake_api.wait_for(lambda api: ("shop", "old-one") not in api.oomincidents)
    fake_api.wait_for(lambda api: any(o["kills"] == 5 for o in api.oomincidents.values()))
    assert ("shop", "other-node") in fake_api.oomincidents  # another agent's to collect


@pytest.fixture
def no_crd_api() -> Any:
    api = FakeApiServer(crd_installed=False).start()
    try:
        yield api
    finally:
        api.stop()


def test_without_the_crd_the_agent_says_so_once_and_keeps_its_events(
    no_crd_api: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    configuration = client.Configuration(host=no_crd_api.url)
    configuration.retries = 0
    uid = _pod(no_crd_api)
    with client.ApiClient(configuration) as api_client:
        kube = KubeIntegration(
            NODE,
            annotate=False,
            submit=lambda _: None,
            kernel_kills_for=lambda *_: 0,
            api_client=api_client,
            watch_timeout_s=5,
            backoff_max_s=0.4,
            incident_writer_options=FAST,
        )
        kube.start()
        try:
            with caplog.at_level(logging.WARNING, logger="oomwatch.kube.incident_writer"):
                _emit_all(no_crd_api, kube, _kills(uid, 5))
                no_crd_api.wait_for(lambda api: len(api.event_writes) >= 2)
                settled("the writer's warnings", lambda: len(caplog.records), 0.5, 10.0)
        finally:
            kube.stop(timeout_s=2)
    said = [r for r in caplog.records if r.getMessage() == "oomincidents_unavailable"]
    assert len(said) == 1
    assert not no_crd_api.oomincidents
    assert kube.incidents is not None and not kube.incidents.available


class _Objects:
    """CustomObjectsApi in memory: what the writer calls, by name."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []

    def list_cluster_custom_object(self, *args: Any, **kw: Any) -> dict[str, Any]:
        self.calls.append("list")
        return {"items": list(self.objects.values())}

    def create_namespaced_custom_object(
        self, g: str, v: str, ns: str, p: str, body: Any, **kw: Any
    ) -> Any:
        self.calls.append("create")
        self.objects[(ns, body["metadata"]["name"])] = body
        return body

    def patch_namespaced_custom_object(
        self, g: str, v: str, ns: str, p: str, name: str, body: Any, **kw: Any
    ) -> Any:
        self.calls.append("patch")
        self.objects[(ns, name)].update({k: v for k, v in body.items() if k != "metadata"})
        return self.objects[(ns, name)]

    def delete_namespaced_custom_object(
        self, g: str, v: str, ns: str, p: str, name: str, **kw: Any
    ) -> Any:
        self.calls.append("delete")
        return self.objects.pop((ns, name))


def test_a_namespace_keeps_at_most_its_cap_of_a_nodes_objects() -> None:
    from oomwatch.kube.incident_writer import IncidentWriter
    from oomwatch.kube.oomincident import Fingerprint, build_object

    api = _Objects()
    writer = IncidentWriter(api, NODE, rate_per_s=1000.0, burst=100, max_per_namespace=2)
    stop = threading.Event()
    for i, workload in enumerate(("Deployment/a", "Deployment/b", "Deployment/c")):
        fp = Fingerprint("shop", workload, "app", "limit-container", NODE)
        seen = f"2026-11-26T10:0{i}:00Z"
        obj = build_object(
            _kills("uid", 1)[0], fp, pod="p", kills=1, first_seen=seen, last_seen=seen
        )
        writer.offer(fp, obj, seen)
        while writer.pending():
            writer._turn(stop)
    assert sorted(o["workload"] for o in api.objects.values()) == ["Deployment/b", "Deployment/c"]
    assert api.calls == ["list", "create", "create", "delete", "create"]
