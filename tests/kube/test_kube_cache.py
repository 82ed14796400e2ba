"""Pod cache and enrichment through list + watch (official client, fake API server)."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes import client
from support.fakeapi import NODE, FakeApiServer, make_pod
from support.kube_scenario import (
    CID,
    app_pod,
    enriched,
    kill,
    wait,
)

from oomwatch.incident import (
    PodContext,
)
from oomwatch.kube import KubeIntegration


def test_enrichment_from_the_node_scoped_list(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    fake_api.put_pod(make_pod("elsewhere", node="node-b"))
    kube = make_kube()
    incident = enriched(kube, kill())
    assert incident.k8s == PodContext(
        namespace="shop",
        pod="web-7d4b9c8f6d-x2x9z",
        container="app",
        node=NODE,
        owner_kind="Deployment",
        owner_name="web",
        qos_class="burstable",
        container_memory_request_bytes=128 * 2**20,
        container_memory_limit_bytes=256 * 2**20,
        pod_memory_request_bytes=128 * 2**20,
        pod_memory_limit_bytes=256 * 2**20,
        restart_count=0,
    )
    assert [p.name for p in kube.cache.pods()] == ["web-7d4b9c8f6d-x2x9z"]
    list_paths = [p for verb, _, r, p in fake_api.requests if verb == "list" and r == "pods"]
    assert list_paths == ["/api/v1/pods"]


def test_incident_before_the_pod_is_retried_until_the_watch_delivers_it(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    kube = make_kube()
    wait(lambda: kube.cache.synced)
    incident = kill()
    assert kube.enricher.enrich(incident) is False  # not yet known: the pipeline retries
    fake_api.put_pod(app_pod())
    assert enriched(kube, incident).k8s is not None
    assert incident.k8s is not None and incident.k8s.container == "app"
    assert ("watch", "", "pods") in fake_api.seen()


def test_restarted_container_is_matched_by_its_last_state(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    new_id = "d" * 64
    fake_api.put_pod(
        app_pod(
            statuses=[
                {
                    "name": "app",
                    "containerID": f"containerd://{new_id}",
                    "restartCount": 1,
                    "state": {"running": {"startedAt": "2026-11-22T08:01:00Z"}},
                    "lastState": {
                        "terminated": {
                            "reason": "OOMKilled",
                            "exitCode": 137,
                            "containerID": f"containerd://{CID}",
                            "startedAt": "2026-11-22T08:00:00Z",
                            "finishedAt": "2026-11-22T08:00:59Z",
                        }
                    },
                }
            ]
        )
    )
    kube = make_kube()
    incident = enriched(kube, kill())
    assert incident.k8s is not None
    assert (incident.k8s.container, incident.k8s.restart_count) == ("app", 1)
    assert incident.k8s.last_termination_reason == "OOMKilled"
    assert incident.k8s.last_termination_exit_code == 137


def test_static_pod_is_found_by_the_mirror_annotation(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    config_hash = "6b1e2f3a4c5d6e7f8a9b0c1d2e3f4a5b"
    mirror = make_pod(
        "etcd-node-a",
        "kube-system",
        owner=("Node", NODE),
        labels={},
        annotations={"kubernetes.io/config.mirror": config_hash},
        qos="Burstable",
    )
    stored = fake_api.put_pod(mirror)
    kube = make_kube()
    incident = kill(pod_uid=config_hash, container_id="a" * 63 + "0")
    enriched(kube, incident)
    assert incident.k8s is not None and incident.k8s.pod == "etcd-node-a"
    kube.sink.emit(incident)
    created = fake_api.wait_for(lambda api: list(api.events.values()))
    assert created[0]["regarding"]["uid"] == stored["metadata"]["uid"]  # the mirror's uid


def test_watch_expiry_410_relists(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    kube = make_kube()
    wait(lambda: kube.cache.synced)
    fake_api.wait_for(lambda api: ("watch", "", "pods") in api.seen())
    fake_api.compact()  # the open watch gets ERROR 410; the next watch must start from a list
    fake_api.put_pod(app_pod())
    enriched(kube, kill())
    lists = [r for r in fake_api.requests if r[0] == "list"]
    assert len(lists) >= 2


def test_watch_resumes_from_the_bookmark_without_relisting(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    kube = make_kube(watch_timeout_s=1)
    wait(lambda: kube.cache.synced)
    fake_api.wait_for(lambda api: len(api.watch_versions) >= 1)
    for i in range(3):  # changes on another node move resourceVersion, unseen by our watch
        fake_api.put_pod(make_pod(f"other-{i}", node="node-b"))
    newest = fake_api.put_pod(make_pod("other-last", node="node-b"))["metadata"]
    fake_api.wait_for(lambda api: newest["resourceVersion"] in api.watch_versions, timeout_s=5)
    fake_api.put_pod(app_pod())
    enriched(kube, kill())
    assert [r[0] for r in fake_api.requests if r[2] == "pods"].count("list") == 1


def test_every_request_carries_the_service_account_token(fake_api: FakeApiServer) -> None:
    fake_api.put_pod(app_pod())
    configuration = client.Configuration(host=fake_api.url)
    configuration.api_key = {"authorization": "t0ken"}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    with client.ApiClient(configuration) as api:
        kube = KubeIntegration(
            NODE,
            annotate=True,
            submit=lambda _: None,
            kernel_kills_for=lambda *_: 0,
            api_client=api,
        )
        kube.start()
        kube.sink.emit(enriched(kube, kill()))
        fake_api.wait_for(
            lambda a: {v for v, _ in a.authorizations} >= {"list", "watch", "create", "patch"}
        )
        kube.stop(timeout_s=5)
    assert {auth for _, auth in fake_api.authorizations} == {"Bearer t0ken"}


def test_api_outage_at_startup_then_recovery(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    fake_api.unavailable = True
    kube = make_kube()
    fake_api.wait_for(lambda api: any(r == "pods" for _, _, r in api.seen()))  # and got a 503
    incident = kill()
    assert kube.enricher.enrich(incident) is False
    assert not kube.connected and kube.healthy()
    fake_api.unavailable = False
    enriched(kube, incident)
    assert kube.connected
