"""Event bodies as pure functions: field paths, the note's limits, Node Events, no Event."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support.fakeapi import make_pod

from oomwatch.diagnosis import diagnose
from oomwatch.incident import Finding, Incident, Victim
from oomwatch.kube.events import NOTE_MAX_BYTES, build_event, clip_utf8, event_reason
from oomwatch.kube.pods import decode_pod
from oomwatch.probe.oom_messages import parse_tf_oom, parse_torch_oom

NOW = datetime(2026, 11, 22, 8, 30, 0, 123456, tzinfo=UTC)
INIT_ID = "9" * 64


def pod_with_init() -> dict[str, object]:
    raw = make_pod(uid="11111111-2222-3333-4444-555555555555")
    raw["spec"]["initContainers"] = [
        {"name": "migrate", "image": "m:1", "resources": {"limits": {"memory": "64Mi"}}}
    ]
    raw["status"]["initContainerStatuses"] = [
        {
            "name": "migrate",
            "containerID": f"containerd://{INIT_ID}",
            "restartCount": 0,
            "image": "m:1",
            "imageID": "m@sha256:" + "0" * 64,
            "ready": False,
            "state": {"running": {}},
        }
    ]
    return raw


def test_init_container_kill_points_at_spec_init_containers() -> None:
    pod = decode_pod(pod_with_init())
    incident = Incident(
        kind="memcg",
        kernel_time_s=5.0,
        pod_uid=pod.uid,
        container_id=INIT_ID,
        limit_scope="container",
        victims=[Victim(pid=3, comm="migrate")],
    )
    draft = build_event(incident, "node-a", NOW, pod)
    assert draft is not None and draft.container == "migrate"
    assert draft.body["regarding"]["fieldPath"] == "spec.initContainers{migrate}"
    assert draft.body["eventTime"] == "2026-11-22T08:30:00.123456Z"


def test_note_is_cut_at_1024_bytes_in_the_advice_never_the_command() -> None:
    pod = decode_pod(make_pod(uid="11111111-2222-3333-4444-555555555555"))
    incident = diagnose(
        Incident(
            kind="eviction",
            pod_uid=pod.uid,
            findings=[Finding("memory_pressure_eviction", "warning", "x" * 3000)],
        )
    )
    incident.recommendation = {"action": "resize", "message": "y" * 3000}
    draft = build_event(incident, "node-a", NOW, pod)
    assert draft is not None
    note = draft.body["note"]
    assert len(note) == NOTE_MAX_BYTES and note.startswith(incident.verdict or "?")
    assert "yyy... Findings: eviction. Full report: kubectl" in note
    assert note.endswith(f"kubectl oomwatch report pod/{pod.name} -n {pod.namespace}")


@pytest.mark.parametrize("char", ["é", "内", "😀"])  # 2, 3 and 4 bytes in UTF-8
def test_multibyte_note_is_cut_at_a_character_boundary_within_1024_bytes(char: str) -> None:
    text = "evicted: " + char * 1500
    note = clip_utf8(text, NOTE_MAX_BYTES)
    encoded = note.encode()
    assert len(encoded) <= NOTE_MAX_BYTES and note.endswith("...")
    assert len(encoded) > NOTE_MAX_BYTES - 3 - len(char.encode())  # no more cut than needed
    assert text.startswith(note[:-3])  # whole characters only (it decoded as UTF-8 above)
    assert clip_utf8("short é", NOTE_MAX_BYTES) == "short é"
    assert clip_utf8("a\udcff", NOTE_MAX_BYTES) == "a?"  # an undecodable byte is counted once


def test_no_event_for_a_pod_the_api_does_not_show_or_a_non_pod_cgroup() -> None:
    in_unknown_pod = Incident(
        kind="memcg",
        pod_uid="22222222-0000-0000-0000-000000000000",
        limit_scope="container",
        victims=[Victim(pid=1, comm="a")],
    )
    assert build_event(in_unknown_pod, "node-a", NOW, None) is None
    system_service = Incident(
        kind="memcg",
        limit_scope="cgroup",
        oom_memcg="/system.slice/x",
        victims=[Victim(pid=1, comm="a")],
    )
    assert build_event(system_service, "node-a", NOW, None) is None


def test_kubepods_limit_kill_without_a_pod_is_a_node_event() -> None:
    incident = Incident(
        kind="memcg", limit_scope="node", oom_memcg="/kubepods", victims=[Victim(pid=1, comm="a")]
    )
    assert event_reason(incident) == "NodeOOMKill"
    draft = build_event(incident, "node-a", NOW, None)
    assert draft is not None
    assert draft.body["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
    assert draft.namespace == "default"
    assert draft.body["note"].startswith("memcg OOM incident (not diagnosed). Full report:")
    diagnosed = build_event(diagnose(incident), "node-a", NOW, None)
    assert diagnosed is not None
    assert diagnosed.body["note"].startswith(
        "a (pid 1) in cgroup /kubepods was killed when node allocatable (all pods together) ran out"
    )
    assert diagnosed.body["note"].endswith("Full report: kubectl oomwatch report node/node-a")


def test_event_names_are_stable_for_the_same_kill() -> None:
    pod = decode_pod(make_pod(uid="11111111-2222-3333-4444-555555555555"))
    incident = Incident(
        kind="memcg",
        kernel_time_s=7.0,
        pod_uid=pod.uid,
        limit_scope="pod",
        victims=[Victim(pid=3, comm="a")],
    )
    first = build_event(incident, "node-a", NOW, pod)
    again = build_event(incident, "node-a", datetime.now(UTC), pod)
    assert first is not None and again is not None
    assert first.name == again.name  # a retried create after a lost reply is a 409, not a copy


TF_OOM = (
    "OOM when allocating tensor with shape[1099511627776] and type float on "
    "/job:localhost/replica:0/task:0/device:{} by allocator {}"
)


@pytest.mark.parametrize(
    ("framework", "message", "reason"),
    [
        (
            "torch-cuda",
            "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 2.00 GiB total "
            "capacity; 1.44 GiB already allocated; 0 bytes free; 1.50 GiB reserved in total by "
            "PyTorch)",
            "CUDAOutOfMemory",
        ),
        (
            "torch-cuda",
            "CUDA out of memory. Tried to allocate 20.00 MiB. GPU  has a total "
            "capacity of 22.19 GiB of which 8.50 MiB is free.",
            "CUDAOutOfMemory",
        ),  # no number
        ("tensorflow", TF_OOM.format("GPU:0", "GPU_0_bfc"), "CUDAOutOfMemory"),
        ("tensorflow", TF_OOM.format("CPU:0", "mklcpu"), "FrameworkOutOfMemory"),
        ("tensorflow", "ResourceExhaustedError: out of memory", "FrameworkOutOfMemory"),
    ],
)
def test_framework_reason_says_cuda_only_for_a_cuda_device(
    framework: str, message: str, reason: str
) -> None:
    parse = parse_torch_oom if framework == "torch-cuda" else parse_tf_oom
    allocator = {"framework": framework, "device": parse(message).device, "message": message}
    incident = Incident(kind="framework", kernel_time_s=1.0, allocator=allocator)
    assert event_reason(incident) == reason
