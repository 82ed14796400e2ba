"""KubeIntegration against the fake API server with the official client, unmodified."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fakeapi import NODE, FakeApiServer, make_pod
from kubernetes import client

from oomwatch.incident import (
    Breakdown,
    Incident,
    MemcgUsage,
    PodContext,
    TaskRow,
    Victim,
)
from oomwatch.kube import KubeIntegration

CID = "c" * 64
UID = "0f3c5e8a-2b1d-4c7e-9a6f-1d2e3f4a5b6c"
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|\+00:00)$")


def app_pod(**kwargs: Any) -> dict[str, Any]:
    statuses = [{"name": "app", "containerID": f"containerd://{CID}", "restartCount": 0,
                 "state": {"running": {"startedAt": "2026-11-22T08:00:00Z"}}}]
    return make_pod(uid=UID, statuses=kwargs.pop("statuses", statuses), **kwargs)


def kill(pid: int = 4242, comm: str = "python", t: float = 1234.5, **kwargs: Any) -> Incident:
    """A container-limit kill as the decoder and identity mapping fill it (v1 report shape)."""
    memcg = f"/kubepods/burstable/pod{UID}/{CID}"
    fields: dict[str, Any] = dict(
        kind="memcg", constraint="CONSTRAINT_MEMCG", kernel_time_s=t,
        oom_memcg=memcg, task_memcg=memcg,
        memcg=MemcgUsage(usage_kb=262144, limit_kb=262144, failcnt=12),
        breakdown_bytes=Breakdown(anon=260_000_000, file=1_000_000, shmem=0, thp=0,
                                  kernel=2_000_000),
        tasks=[TaskRow(pid=pid, name=comm, rss_pages=63000), TaskRow(pid=7, name="sh",
                                                                        rss_pages=200)],
        victims=[Victim(pid=pid, comm=comm, anon_rss_kb=255000, file_rss_kb=1200,
                        shmem_rss_kb=0)],
        pod_uid=UID, container_id=CID, qos_class="burstable", limit_scope="container",
        cgroup_driver="cgroupfs", runtime="containerd", container_survived=False,
    )
    fields.update(kwargs)
    return Incident(**fields)


@pytest.fixture
def make_kube(api_client: client.ApiClient) -> Iterator[Callable[..., KubeIntegration]]:
    started: list[KubeIntegration] = []

    def make(
        annotate: bool = False,
        kills: Callable[[str, float, float], int] = lambda *_: 0,
        submitted: list[Incident] | None = None,
        **kwargs: Any,
    ) -> KubeIntegration:
        sink = submitted if submitted is not None else []
        kube = KubeIntegration(NODE, annotate=annotate, submit=sink.append,
                               kernel_kills_for=kills, api_client=api_client,
                               verify_delay_s=kwargs.pop("verify_delay_s", 0.2),
                               watch_timeout_s=kwargs.pop("watch_timeout_s", 5),
                               backoff_max_s=0.4, **kwargs)
        kube.start()
        started.append(kube)
        return kube

    yield make
    for kube in started:
        kube.stop(timeout_s=2)


def wait(predicate: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met")


def enriched(kube: KubeIntegration, incident: Incident) -> Incident:
    wait(lambda: kube.enricher.enrich(incident))
    return incident


# --- pod cache and enrichment --------------------------------------------------------------


def test_enrichment_from_the_node_scoped_list(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    fake_api.put_pod(make_pod("elsewhere", node="node-b"))
    kube = make_kube()
    incident = enriched(kube, kill())
    assert incident.k8s == PodContext(
        namespace="shop", pod="web-7d4b9c8f6d-x2x9z", container="app", node=NODE,
        owner_kind="Deployment", owner_name="web", qos_class="burstable",
        container_memory_request_bytes=128 * 2**20, container_memory_limit_bytes=256 * 2**20,
        pod_memory_request_bytes=128 * 2**20, pod_memory_limit_bytes=256 * 2**20,
        restart_count=0,
    )
    assert [p.name for p in kube.cache.pods()] == ["web-7d4b9c8f6d-x2x9z"]
    list_paths = [path for verb, _, _, path in fake_api.requests if verb == "list"]
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
    fake_api.put_pod(app_pod(statuses=[{
        "name": "app", "containerID": f"containerd://{new_id}", "restartCount": 1,
        "state": {"running": {"startedAt": "2026-11-22T08:01:00Z"}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                     "containerID": f"containerd://{CID}",
                                     "startedAt": "2026-11-22T08:00:00Z",
                                     "finishedAt": "2026-11-22T08:00:59Z"}},
    }]))
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
    mirror = make_pod("etcd-node-a", "kube-system", owner=("Node", NODE), labels={},
                      annotations={"kubernetes.io/config.mirror": config_hash}, qos="Burstable")
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
    assert [r[0] for r in fake_api.requests].count("list") == 1


def test_every_request_carries_the_service_account_token(fake_api: FakeApiServer) -> None:
    fake_api.put_pod(app_pod())
    configuration = client.Configuration(host=fake_api.url)
    configuration.api_key = {"authorization": "t0ken"}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    with client.ApiClient(configuration) as api:
        kube = KubeIntegration(NODE, annotate=True, submit=lambda _: None,
                               kernel_kills_for=lambda *_: 0, api_client=api)
        kube.start()
        kube.sink.emit(enriched(kube, kill()))
        fake_api.wait_for(lambda a: {v for v, _ in a.authorizations} >= {
            "list", "watch", "create", "patch"})
        kube.stop(timeout_s=5)
    assert {auth for _, auth in fake_api.authorizations} == {"Bearer t0ken"}


def test_api_outage_at_startup_then_recovery(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    fake_api.unavailable = True
    kube = make_kube()
    time.sleep(0.5)
    incident = kill()
    assert kube.enricher.enrich(incident) is False
    assert not kube.connected and kube.healthy()
    fake_api.unavailable = False
    enriched(kube, incident)
    assert kube.connected


# --- Events --------------------------------------------------------------------------------


def event_for(fake_api: FakeApiServer, count: int = 1) -> list[dict[str, Any]]:
    writes = fake_api.wait_for(
        lambda api: [b for op, b in api.event_writes if op == "create"][count - 1 :]
        and [b for op, b in api.event_writes if op == "create"]
    )
    return list(writes)


def assert_event(body: dict[str, Any], reason: str, action: str, note: str,
                 regarding: dict[str, Any], namespace: str = "shop") -> None:
    name = body["metadata"]["name"]
    assert re.fullmatch(rf"{re.escape(regarding['name'])}\.[0-9a-f]{{16}}", name)
    assert MICRO.match(body.pop("eventTime"))
    assert body == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Warning",
        "reason": reason,
        "action": action,
        "note": note,
        "reportingController": "oomwatch.io/agent",
        "reportingInstance": f"oomwatch-{NODE}",
        "regarding": regarding,
    }


POD_REF = {"apiVersion": "v1", "kind": "Pod", "namespace": "shop",
           "name": "web-7d4b9c8f6d-x2x9z", "uid": UID, "fieldPath": "spec.containers{app}"}
KILLED_NOTE = (
    "OOM killer killed python (pid 4242, rss 250.2MiB) in container app at the container"
    " memory limit; usage 256.0MiB of limit 256.0MiB; mostly anon 248.0MiB, largest process"
    " python (pid 4242)"
)


@pytest.mark.parametrize(
    ("changes", "reason", "tail"),
    [
        ({}, "OOMKillDetected", "; container was killed"),
        ({"container_survived": True}, "ChildProcessOOMKilled",
         "; container survived (still running; Kubernetes shows nothing)"),
    ],
)
def test_event_for_a_container_limit_kill(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration],
    changes: dict[str, Any], reason: str, tail: str,
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    kube.sink.emit(enriched(kube, kill(**changes)))
    (body,) = event_for(fake_api)
    assert_event(body, reason, "Killed", KILLED_NOTE + tail, POD_REF)


def test_event_for_a_group_kill(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    group = kill(group_kill=True, group_cgroup=f"/kubepods/burstable/pod{UID}/{CID}",
                 victims=[Victim(pid=10 + i, comm=f"worker{i}") for i in range(7)])
    kube.sink.emit(enriched(kube, group))
    (body,) = event_for(fake_api)
    note = (
        "memory.oom.group killed all 7 processes in container app at the container memory"
        " limit: worker0 (pid 10), worker1 (pid 11), worker2 (pid 12), worker3 (pid 13),"
        " worker4 (pid 14) and 2 more; usage 256.0MiB of limit 256.0MiB; mostly anon"
        " 248.0MiB, largest process python (pid 4242); container was killed"
    )
    assert_event(body, "GroupOOMKill", "Killed", note, POD_REF)


def test_event_for_a_pod_limit_kill(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    pod_kill = kill(limit_scope="pod", oom_memcg=f"/kubepods/burstable/pod{UID}", memcg=None,
                    breakdown_bytes=None, tasks=[])
    kube.sink.emit(enriched(kube, pod_kill))
    (body,) = event_for(fake_api)
    note = (
        "OOM killer killed python (pid 4242, rss 250.2MiB) in container app at the pod memory"
        " limit; limit 256.0MiB; container was killed"
    )
    assert_event(body, "PodLimitOOMKill", "Killed", note, POD_REF)


def test_global_oom_without_a_pod_goes_on_the_node(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    kube = make_kube()
    node_kill = Incident(kind="global", constraint="CONSTRAINT_NONE", kernel_time_s=99.0,
                         limit_scope="global", victims=[Victim(pid=881, comm="containerd",
                                                               anon_rss_kb=1024)])
    assert kube.enricher.enrich(node_kill) is True  # nothing to wait for
    kube.sink.emit(node_kill)
    (body,) = event_for(fake_api)
    note = "OOM killer killed containerd (pid 881, rss 1.0MiB) at node memory (global OOM)"
    assert_event(body, "NodeOOMKill", "Killed", note,
                 {"apiVersion": "v1", "kind": "Node", "name": NODE}, namespace="default")


def probe_allocator() -> dict[str, Any]:
    """The `allocator` section the probe join fills for a CUDA OOM (oomwatch.probe.join)."""
    return {"source": "probe", "file": "trainer-0.ring", "framework": "torch-cuda",
            "device": "cuda:0", "requested_bytes": 2 * 2**30, "free_bytes": 1181116006,
            "total_bytes": 85_045_821_440, "allocated_bytes": 75_483_000_000,
            "reserved_unallocated_bytes": 3_435_973_836, "phase": "forward", "epoch": 3,
            "step": 1200, "batch_size": 64, "message": "CUDA out of memory. Tried to allocate",
            "last_sample": None, "peak": None}


def test_framework_oom_event_from_the_probe_allocator(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    cuda = Incident(kind="framework", kernel_time_s=50.0, pod_uid=UID, container_id=CID,
                    allocator=probe_allocator())
    kube.sink.emit(enriched(kube, cuda))
    (body,) = event_for(fake_api)
    note = ("torch-cuda out of memory on cuda:0 in container app: tried to allocate 2.0GiB,"
            " free 1.1GiB, total 79.2GiB, allocated 70.3GiB, reserved but unallocated 3.2GiB,"
            " phase forward, epoch 3, step 1200, batch_size 64")
    assert_event(body, "CUDAOutOfMemory", "OutOfMemory", note, POD_REF)


def test_names_claimed_by_a_probe_file_never_aim_the_event(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    wait(lambda: kube.cache.synced)
    forged = PodContext(namespace="kube-system", pod="etcd-node-a", container="etcd")
    unknown = Incident(kind="framework", kernel_time_s=1.0, pod_uid=str(uuid.uuid4()),
                       k8s=forged, allocator=probe_allocator())
    kube.sink.emit(unknown)  # a pod the API does not show: logged and stored, no Event
    known = Incident(kind="framework", kernel_time_s=2.0, pod_uid=UID,
                     k8s=PodContext(namespace="kube-system", pod="etcd-node-a",
                                    container="etcd"),
                     allocator=probe_allocator())
    kube.sink.emit(known)  # not enriched yet: the cache, not the claim, names the object
    (body,) = event_for(fake_api)
    assert body["metadata"]["namespace"] == "shop"
    assert body["regarding"] == {k: v for k, v in POD_REF.items() if k != "fieldPath"}
    assert "container" not in body["note"]
    time.sleep(0.3)
    assert len(fake_api.events) == 1


def test_hostile_process_names_are_escaped_in_the_note(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    kube.sink.emit(enriched(kube, kill(comm="x\n\x1b[31mFAKE")))
    (body,) = event_for(fake_api)
    assert "\n" not in body["note"] and "\x1b" not in body["note"]
    assert "x\\x0a\\x1b[31mFAKE (pid 4242" in body["note"]


def test_repeats_update_the_series_instead_of_new_events(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    for i in range(3):
        kube.sink.emit(enriched(kube, kill(pid=100 + i, t=2000.0 + i)))
    fake_api.wait_for(lambda api: len(api.event_writes) == 3)
    ops = [op for op, _ in fake_api.event_writes]
    assert ops == ["create", "patch", "patch"]
    patches = [body for op, body in fake_api.event_writes if op == "patch"]
    assert [p["series"]["count"] for p in patches] == [2, 3]
    assert all(MICRO.match(p["series"]["lastObservedTime"]) for p in patches)
    (stored,) = fake_api.events.values()
    assert stored["series"]["count"] == 3
    assert "pid 102" in stored["note"]  # the note shows the latest kill
    wait(lambda: kube.publisher.delivered == 3)


def test_a_different_container_or_reason_starts_its_own_event(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    kube.sink.emit(enriched(kube, kill()))
    kube.sink.emit(enriched(kube, kill(pid=5, t=3.0, container_survived=True)))
    fake_api.wait_for(lambda api: len(api.events) == 2)
    assert sorted(e["reason"] for e in fake_api.events.values()) == [
        "ChildProcessOOMKilled", "OOMKillDetected"]


def test_expired_series_event_is_created_again(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    kube.sink.emit(enriched(kube, kill()))
    fake_api.wait_for(lambda api: len(api.events) == 1)
    with fake_api.lock:
        fake_api.events.clear()  # the API server's --event-ttl removed it
    kube.sink.emit(enriched(kube, kill(pid=9, t=9.0)))
    fake_api.wait_for(lambda api: len(api.events) == 1)
    assert [op for op, _ in fake_api.event_writes] == ["create", "create"]
    assert ("patch", "events.k8s.io", "events") in fake_api.seen()  # tried the series first


def test_annotation_on_the_pod_is_opt_in(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube(annotate=True)
    kube.sink.emit(enriched(kube, kill(wall_time="2026-11-22T08:05:00.000000+00:00")))
    pod = fake_api.wait_for(
        lambda api: api.pods[("shop", "web-7d4b9c8f6d-x2x9z")]["metadata"].get("annotations"))
    assert json.loads(pod["oomwatch.io/last-oom-kill"]) == {
        "time": "2026-11-22T08:05:00.000000+00:00", "kind": "memcg",
        "reason": "OOMKillDetected", "container": "app", "victim": "python", "pid": 4242,
        "scope": "container", "usage_bytes": 256 * 2**20, "limit_bytes": 256 * 2**20,
        "container_survived": False,
    }


def test_no_annotation_without_the_option(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube(annotate=False)
    kube.sink.emit(enriched(kube, kill()))
    event_for(fake_api)
    assert ("patch", "", "pods") not in fake_api.seen()


# --- resilience ----------------------------------------------------------------------------


def test_events_wait_out_an_outage_and_arrive_in_order(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    first = enriched(kube, kill(pid=1, t=1.0))
    second = enriched(kube, kill(pid=2, t=2.0, container_survived=True))
    fake_api.go_down()
    started = time.monotonic()
    kube.sink.emit(first)
    kube.sink.emit(second)
    assert time.monotonic() - started < 0.1  # emit only queues
    time.sleep(1.0)
    assert kube.publisher.pending() == 2 and not kube.publisher.reachable
    fake_api.come_back()
    fake_api.wait_for(lambda api: len(api.events) == 2)
    reasons = [b["reason"] for op, b in fake_api.event_writes]
    assert reasons == ["OOMKillDetected", "ChildProcessOOMKilled"]
    wait(lambda: kube.publisher.pending() == 0)
    assert kube.publisher.dropped == 0


def test_stop_sends_what_is_queued_first(
    fake_api: FakeApiServer, api_client: client.ApiClient
) -> None:
    fake_api.put_pod(app_pod())
    kube = KubeIntegration(NODE, annotate=False, submit=lambda _: None,
                           kernel_kills_for=lambda *_: 0, api_client=api_client)
    kube.start()
    incidents = [enriched(kube, kill(pid=i, t=float(i), container_survived=i % 2 == 1))
                 for i in range(2)]
    for incident in incidents:
        kube.sink.emit(incident)
    kube.stop(timeout_s=5)
    assert len(fake_api.event_writes) == 2


def test_agent_started_during_an_outage_still_gets_its_event_out(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    fake_api.go_down()
    kube = make_kube()
    incident = kill()
    assert kube.enricher.enrich(incident) is False  # the pipeline gives up waiting, stores it,
    kube.sink.emit(incident)  # and publishes it without pod context
    time.sleep(1.0)
    assert kube.publisher.pending() == 1 and not fake_api.event_writes
    fake_api.come_back()
    (body,) = event_for(fake_api)
    assert body["regarding"] == POD_REF and body["reason"] == "OOMKillDetected"


def test_503_and_429_are_retried(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    incident = enriched(kube, kill())
    fake_api.fail_next += [("create", 503), ("create", 429)]
    kube.sink.emit(incident)
    event_for(fake_api)
    creates = [r for r in fake_api.requests if r[0] == "create"]
    assert len(creates) == 3


def test_rejected_event_is_dropped_and_the_queue_moves_on(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    fake_api.fail_next.append(("create", 403))
    kube.sink.emit(enriched(kube, kill()))
    kube.sink.emit(enriched(kube, kill(pid=3, t=3.0, container_survived=True)))
    (body,) = event_for(fake_api)
    assert body["reason"] == "ChildProcessOOMKilled"


def test_queue_is_bounded_while_the_api_is_down(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube(max_queue=3)
    incidents = [enriched(kube, kill(pid=i, t=float(i), container_survived=i % 2 == 0))
                 for i in range(6)]
    fake_api.go_down()
    for incident in incidents:
        kube.sink.emit(incident)
    assert kube.publisher.pending() == 3 and kube.publisher.dropped == 3
    fake_api.come_back()
    fake_api.wait_for(lambda api: len(api.event_writes) == 3)


# --- incidents only the pod status shows -------------------------------------------------------


def test_memory_eviction_becomes_an_incident(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    fake_api.put_pod(make_pod("batch-1", owner=("Job", "batch"), labels={}))
    submitted: list[Incident] = []
    kube = make_kube(submitted=submitted)
    wait(lambda: kube.cache.synced)
    message = ("The node was low on resource: memory. Threshold quantity: 100Mi, available:"
               " 90Mi. Container app was using 900Mi, request is 128Mi, has larger consumption"
               " of memory. ")
    fake_api.put_pod(app_pod(status_extra={"phase": "Failed", "reason": "Evicted",
                                           "message": message}))
    fake_api.put_pod(make_pod("batch-1", owner=("Job", "batch"), labels={}, status_extra={
        "phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: ephemeral-storage. "}))
    (incident,) = wait(lambda: submitted)
    assert incident.kind == "eviction" and incident.pod_uid == UID
    assert incident.k8s is not None and incident.k8s.pod == "web-7d4b9c8f6d-x2x9z"
    assert incident.findings[0].message.startswith(
        "Pod evicted by the kubelet for node memory pressure: The node was low on resource:")
    time.sleep(0.3)
    assert len(submitted) == 1  # ephemeral-storage evictions are not ours
    kube.sink.emit(incident)
    (body,) = event_for(fake_api)
    assert (body["reason"], body["action"]) == ("MemoryPressureEviction", "Evicted")
    assert body["regarding"] == {k: v for k, v in POD_REF.items() if k != "fieldPath"}


def oomkilled_status(finished: datetime, container_id: str = CID) -> list[dict[str, Any]]:
    stamp = finished.strftime("%Y-%m-%dT%H:%M:%SZ")
    started = (finished - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [{"name": "app", "containerID": "containerd://" + "e" * 64, "restartCount": 1,
             "state": {"running": {"startedAt": stamp}},
             "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                          "containerID": f"containerd://{container_id}",
                                          "startedAt": started, "finishedAt": stamp}}}]


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
    time.sleep(0.3)
    if kernel_kills:
        assert submitted == []
        return
    (incident,) = submitted
    assert (incident.kind, incident.pod_uid, incident.container_id) == (
        "false_oomkilled", UID, CID)
    assert incident.k8s is not None and incident.k8s.container == "app"
    assert incident.findings[0].code == "false_oomkilled"
    kube.sink.emit(incident)
    (body,) = event_for(fake_api)
    assert (body["reason"], body["action"]) == ("OOMKilledWithoutKernelKill", "Verified")
    assert body["note"].startswith("Kubernetes reports container app OOMKilled (exit code 137")


def test_oomkilled_from_before_the_agent_started_is_not_judged(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    old = datetime.now(UTC) - timedelta(hours=1)
    fake_api.put_pod(app_pod(statuses=oomkilled_status(old)))
    asked: list[str] = []
    kube = make_kube(kills=lambda cid, *_: asked.append(cid) or 0)
    wait(lambda: kube.cache.synced)
    time.sleep(0.5)
    assert asked == []
