"""Shared scenario for the KubeIntegration tests: one pod, realistic kills, Event checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from oomwatch.diagnosis import diagnose
from oomwatch.incident import (
    Breakdown,
    Incident,
    MemcgUsage,
    TaskRow,
    Victim,
)
from oomwatch.kube import KubeIntegration
from oomwatch.kube.summary import SUMMARY_ANNOTATION, parse_summary
from support import until
from support.fakeapi import NODE, FakeApiServer, make_pod, running_status

CID = "c" * 64
UID = "0f3c5e8a-2b1d-4c7e-9a6f-1d2e3f4a5b6c"
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|\+00:00)$")


def app_pod(**kwargs: Any) -> dict[str, Any]:
    statuses = [running_status(CID)]
    return make_pod(uid=UID, statuses=kwargs.pop("statuses", statuses), **kwargs)


def kill(pid: int = 4242, comm: str = "python", t: float = 1234.5, **kwargs: Any) -> Incident:
    """A container-limit kill as the decoder and identity mapping fill it (v1 report shape)."""
    memcg = f"/kubepods/burstable/pod{UID}/{CID}"
    fields: dict[str, Any] = dict(
        kind="memcg",
        constraint="CONSTRAINT_MEMCG",
        kernel_time_s=t,
        oom_memcg=memcg,
        task_memcg=memcg,
        memcg=MemcgUsage(usage_bytes=262144 * 1024, limit_bytes=262144 * 1024, failcnt=12),
        breakdown_bytes=Breakdown(
            anon=260_000_000, file=1_000_000, shmem=0, thp=0, kernel=2_000_000
        ),
        tasks=[
            TaskRow(pid=pid, name=comm, rss_pages=63000),
            TaskRow(pid=7, name="sh", rss_pages=200),
        ],
        victims=[
            Victim(
                pid=pid,
                comm=comm,
                anon_rss_bytes=255000 * 1024,
                file_rss_bytes=1200 * 1024,
                shmem_rss_bytes=0,
            )
        ],
        pod_uid=UID,
        container_id=CID,
        qos_class="burstable",
        limit_scope="container",
        cgroup_driver="cgroupfs",
        runtime="containerd",
        container_survived=False,
    )
    fields.update(kwargs)
    return Incident(**fields)


def wait(predicate: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """`predicate`'s first truthy answer (`support.until`, every 20 ms)."""
    return until("the scenario's condition", lambda: predicate() or None, timeout_s, 0.02)


def enriched(kube: KubeIntegration, incident: Incident) -> Incident:
    """The incident enriched, then diagnosed: what the pipeline hands the sinks."""
    wait(lambda: kube.enricher.enrich(incident))
    return diagnose(incident)


def drained(kube: KubeIntegration, timeout_s: float = 10.0) -> None:
    """Wait until the publisher delivered (or dropped) everything emitted so far: what the
    API has then is all it will get from those incidents."""
    wait(lambda: kube.publisher.pending() == 0, timeout_s)


def event_for(fake_api: FakeApiServer, count: int = 1) -> list[dict[str, Any]]:
    writes = fake_api.wait_for(
        lambda api: (
            [b for op, b in api.event_writes if op == "create"][count - 1 :]
            and [b for op, b in api.event_writes if op == "create"]
        )
    )
    return list(writes)


def assert_event(
    body: dict[str, Any],
    reason: str,
    action: str,
    note: str | None,
    regarding: dict[str, Any],
    namespace: str = "shop",
) -> None:
    """The Event's every field (`note=None`: any note, the caller checks it)."""
    if note is None:
        note = body["note"]
    name = body["metadata"]["name"]
    assert re.fullmatch(rf"{re.escape(regarding['name'])}\.[0-9a-f]{{16}}", name)
    assert MICRO.match(body.pop("eventTime"))
    # The diagnosis as data for the fleet view (tests/fleet check its fields).
    summary = parse_summary(body["metadata"].pop("annotations")[SUMMARY_ANNOTATION])
    assert summary is not None and summary["reason"] == reason
    assert summary["workload"].startswith(("Deployment/", "Pod/", "Node/", "StatefulSet/"))
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


POD_REF = {
    "apiVersion": "v1",
    "kind": "Pod",
    "namespace": "shop",
    "name": "web-7d4b9c8f6d-x2x9z",
    "uid": UID,
    "fieldPath": "spec.containers{app}",
}
REPORT_COMMAND = "Full report: kubectl oomwatch report"


def assert_note(note: str, incident: Incident, target: str) -> None:
    """The note speaks from the diagnosis: the verdict first, then the advice and the finding
    codes, and ends with the command for the full report; within the API's 1024 bytes."""
    assert incident.verdict and note.startswith(incident.verdict), note
    advice = (incident.recommendation or {}).get("message")
    if advice:
        assert f" Advice: {advice}" in note
    codes = [f.code for f in incident.findings]
    assert f" Findings: {', '.join(codes)}." in note
    assert note.endswith(f"{REPORT_COMMAND} {target}"), note
    assert len(note.encode()) <= 1024


def probe_allocator() -> dict[str, Any]:
    """The `allocator` section the probe join fills for a CUDA OOM (oomwatch.probe.join)."""
    return {
        "source": "probe",
        "file": "trainer-0.ring",
        "framework": "torch-cuda",
        "device": "cuda:0",
        "requested_bytes": 2 * 2**30,
        "free_bytes": 1181116006,
        "total_bytes": 85_045_821_440,
        "allocated_bytes": 75_483_000_000,
        "reserved_unallocated_bytes": 3_435_973_836,
        "phase": "forward",
        "epoch": 3,
        "step": 1200,
        "batch_size": 64,
        "message": "CUDA out of memory. Tried to allocate",
        "last_sample": None,
        "peak": None,
    }
