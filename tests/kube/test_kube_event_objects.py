"""The exact Event objects per incident kind, series on repeats, and the annotation."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from support.fakeapi import NODE, FakeApiServer, validate_new_event
from support.kube_scenario import (
    CID,
    MICRO,
    POD_REF,
    UID,
    app_pod,
    assert_event,
    assert_note,
    drained,
    enriched,
    event_for,
    kill,
    probe_allocator,
    wait,
)

from oomwatch.diagnosis import diagnose
from oomwatch.incident import (
    Attribution,
    AttributionCandidate,
    Incident,
    PodContext,
    Victim,
)
from oomwatch.kube import KubeIntegration

POD = "pod/web-7d4b9c8f6d-x2x9z -n shop"


@pytest.mark.parametrize(
    ("changes", "reason", "codes"),
    [
        ({}, "ContainerOOMKill", ["limit-container"]),
        (
            {"container_survived": True},
            "ChildProcessOOMKilled",
            ["limit-container", "child-process-kill"],
        ),
    ],
)
def test_event_for_a_container_limit_kill(
    fake_api: FakeApiServer,
    make_kube: Callable[..., KubeIntegration],
    changes: dict[str, Any],
    reason: str,
    codes: list[str],
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    incident = enriched(kube, kill(**changes))
    kube.sink.emit(incident)
    (body,) = event_for(fake_api)
    assert_event(body, reason, "Killed", None, POD_REF)
    assert_note(body["note"], incident, POD)
    assert [f.code for f in incident.findings] == codes
    assert body["note"].startswith(
        "python (pid 4242) in pod shop/web-7d4b9c8f6d-x2x9z container app was killed at its"
        " container memory limit of 256 MiB: mostly heap (97 %); set the container's memory"
        " limit to at least 308 MiB. Advice: Set the container's memory limit to at least"
        " 308 MiB (20 % above usage at the kill). In the container's spec:"
        " `resources.limits.memory: 308Mi`."
    )


def test_event_for_a_group_kill(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    group = kill(
        group_kill=True,
        group_cgroup=f"/kubepods/burstable/pod{UID}/{CID}",
        victims=[Victim(pid=10 + i, comm=f"worker{i}") for i in range(7)],
    )
    group = enriched(kube, group)
    kube.sink.emit(group)
    (body,) = event_for(fake_api)
    assert_event(body, "GroupOOMKill", "Killed", None, POD_REF)
    assert_note(body["note"], group, POD)
    assert body["note"].startswith("worker0 (pid 10) ")
    assert "group-kill" in body["note"]


def test_event_for_a_pod_limit_kill(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    pod_kill = kill(
        limit_scope="pod",
        oom_memcg=f"/kubepods/burstable/pod{UID}",
        memcg=None,
        breakdown_bytes=None,
        tasks=[],
    )
    pod_kill = enriched(kube, pod_kill)
    kube.sink.emit(pod_kill)
    (body,) = event_for(fake_api)
    assert_event(body, "PodLimitOOMKill", "Killed", None, POD_REF)
    assert_note(body["note"], pod_kill, POD)
    assert "was killed at the pod-level memory limit" in body["note"]


def test_global_oom_without_a_pod_goes_on_the_node(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    kube = make_kube()
    node_kill = Incident(
        kind="global",
        constraint="CONSTRAINT_NONE",
        kernel_time_s=99.0,
        limit_scope="global",
        victims=[Victim(pid=881, comm="containerd", anon_rss_bytes=1024 * 1024)],
    )
    assert kube.enricher.enrich(node_kill) is True  # nothing to wait for
    node_kill = diagnose(node_kill)
    kube.sink.emit(node_kill)
    (body,) = event_for(fake_api)
    assert_event(
        body,
        "NodeOOMKill",
        "Killed",
        None,
        {"apiVersion": "v1", "kind": "Node", "name": NODE},
        namespace="default",
    )
    assert_note(body["note"], node_kill, f"node/{NODE}")
    assert body["note"].startswith(
        "containerd (pid 881) in an unknown cgroup was killed when"
        " the node ran out of memory (global OOM)"
    )


def test_framework_oom_event_from_the_probe_allocator(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    cuda = Incident(
        kind="framework",
        kernel_time_s=50.0,
        pod_uid=UID,
        container_id=CID,
        allocator=probe_allocator(),
    )
    cuda = enriched(kube, cuda)
    kube.sink.emit(cuda)
    (body,) = event_for(fake_api)
    assert_event(body, "CUDAOutOfMemory", "OutOfMemory", None, POD_REF)
    assert_note(body["note"], cuda, POD)
    assert body["note"].startswith(
        "Torch-cuda ran out of device memory in pod shop/web-7d4b9c8f6d-x2x9z container app"
        " asking for 2 GiB: this job fills the device itself; lower the batch size or model"
        " footprint."
    )


def test_a_long_multibyte_note_is_accepted_by_the_api(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    """The API server counts the note's bytes (Go len); a 1024-character cut was a 422."""
    fake_api.put_pod(app_pod())
    kube = make_kube()
    advice = "容器内存不足，驱逐中。" * 80
    evicted = enriched(
        kube, Incident(kind="eviction", kernel_time_s=3.0, pod_uid=UID, container_id=CID)
    )
    evicted.recommendation = {"action": "relieve-node", "message": advice}
    kube.sink.emit(evicted)
    (body,) = event_for(fake_api)  # the fake API rejects a note over 1024 bytes, as the real one
    assert body["reason"] == "MemoryPressureEviction"
    note = body["note"]
    assert len(note) < 1024 < len(advice.encode())
    assert len(note.encode()) >= 1024 - 3 - 2
    # The advice is clipped (whole characters), never the verdict or the command.
    assert note.startswith(evicted.verdict or "?") and note.endswith(POD)
    assert "... Findings: eviction. Full report: " in note


def test_the_fake_api_counts_note_bytes() -> None:
    event = {
        "eventTime": "2026-11-22T08:00:00.000000Z",
        "type": "Warning",
        "action": "Killed",
        "reason": "ContainerOOMKill",
        "reportingController": "oomwatch.io/agent",
        "reportingInstance": "oomwatch-node-a",
    }
    assert validate_new_event({**event, "note": "x" * 1024}, "shop", creating=True) is None
    assert validate_new_event({**event, "note": "é" * 1000}, "shop", creating=True) == (
        "note: Too long: may not be longer than 1024"
    )


def test_names_claimed_by_a_probe_file_never_aim_the_event(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    wait(lambda: kube.cache.synced)
    forged = PodContext(namespace="kube-system", pod="etcd-node-a", container="etcd")
    unknown = Incident(
        kind="framework",
        kernel_time_s=1.0,
        pod_uid=str(uuid.uuid4()),
        k8s=forged,
        allocator=probe_allocator(),
    )
    kube.sink.emit(diagnose(unknown))  # a pod the API does not show: logged and stored, no Event
    known = Incident(
        kind="framework",
        kernel_time_s=2.0,
        pod_uid=UID,
        k8s=PodContext(namespace="kube-system", pod="etcd-node-a", container="etcd"),
        allocator=probe_allocator(),
    )
    kube.sink.emit(diagnose(known))  # not enriched yet: the cache, not the claim, names it
    (body,) = event_for(fake_api)
    assert body["metadata"]["namespace"] == "shop"
    assert body["regarding"] == {k: v for k, v in POD_REF.items() if k != "fieldPath"}
    assert body["note"].endswith(POD)  # the report command names the API's pod
    drained(kube)  # no second Event follows
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
    assert "(pid 102)" in stored["note"]  # the note shows the latest kill
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
        "ChildProcessOOMKilled",
        "ContainerOOMKill",
    ]


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
        lambda api: api.pods[("shop", "web-7d4b9c8f6d-x2x9z")]["metadata"].get("annotations")
    )
    assert json.loads(pod["oomwatch.io/last-oom-kill"]) == {
        "time": "2026-11-22T08:05:00.000000+00:00",
        "kind": "memcg",
        "reason": "ContainerOOMKill",
        "container": "app",
        "victim": "python",
        "pid": 4242,
        "scope": "container",
        "usage_bytes": 256 * 2**20,
        "limit_bytes": 256 * 2**20,
        "container_survived": False,
        "verdict": "python (pid 4242) in pod shop/web-7d4b9c8f6d-x2x9z container app was"
        " killed at its container memory limit of 256 MiB: mostly heap (97 %); set the"
        " container's memory limit to at least 308 MiB.",
        "verdict_code": "limit-container",
        "findings": ["limit-container"],
        "advice": "resize",
        "memory_limit": "308Mi",
    }


def test_no_annotation_without_the_option(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube(annotate=False)
    kube.sink.emit(enriched(kube, kill()))
    event_for(fake_api)
    assert ("patch", "", "pods") not in fake_api.seen()


def test_an_ambiguous_kill_sends_no_event_and_no_annotation_to_any_candidate(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    """The kernel's evidence left two pods, one of them this one: an Event would charge a pod
    that may be innocent, so none goes out (the kill is logged, counted and stored)."""
    fake_api.put_pod(app_pod())
    kube = make_kube(annotate=True)
    wait(lambda: kube.cache.synced)
    other = f"/kubepods/burstable/pod{uuid.uuid4()}/{'c' * 64}"
    candidates = [
        AttributionCandidate(f"/kubepods/burstable/pod{UID}/{CID}", UID, CID),
        AttributionCandidate(other),
    ]
    unsure = kill(
        task_memcg=None,
        oom_memcg=None,
        pod_uid=None,
        container_id=None,
        limit_scope=None,
        header_suppressed=True,
        tasks=[],
        attribution=Attribution("counter", "ambiguous", candidates, "two rose"),
    )
    kube.enricher.enrich(unsure)
    assert unsure.attribution is not None
    assert unsure.attribution.candidates[0].pod == "web-7d4b9c8f6d-x2x9z"  # named, not charged
    kube.sink.emit(unsure)
    kube.sink.emit(enriched(kube, kill(t=2000.0)))  # a sure kill after it still gets its Event
    (body,) = event_for(fake_api)
    assert body["regarding"]["name"] == "web-7d4b9c8f6d-x2x9z"
    annotated = fake_api.wait_for(
        lambda api: api.pods[("shop", "web-7d4b9c8f6d-x2x9z")]["metadata"].get("annotations")
    )
    assert json.loads(annotated["oomwatch.io/last-oom-kill"])["time"].startswith("20")
    drained(kube)  # no Event follows for the ambiguous kill
    assert len(fake_api.events) == 1  # the sure kill's; none for the ambiguous one
