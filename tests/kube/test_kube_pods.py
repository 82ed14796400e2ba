"""Decoding pods and quantities (pure): what the cache keeps of the API's JSON."""

from __future__ import annotations

import pytest
from support.fakeapi import make_pod

from oomwatch.kube.pods import PodDecodeError, decode_pod, strip_runtime_prefix
from oomwatch.kube.quantity import QuantityError, parse_quantity_bytes, quantity_bytes_or_none


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("128Mi", 128 * 2**20),
        ("1Gi", 2**30),
        ("512Ki", 512 * 1024),
        ("1.5Gi", 3 * 2**29),
        ("1G", 10**9),
        ("500M", 5 * 10**8),
        ("129e6", 129_000_000),
        ("1.5e3", 1500),
        ("100m", 1),  # 0.1 byte rounds up, as the API server does for memory
        ("123", 123),
        ("0", 0),
        (" 64Mi ", 64 * 2**20),
    ],
)
def test_quantities(text: str, expected: int) -> None:
    assert parse_quantity_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "Mi", "12Mb", "1..2", "1e999", "ten", "1 Gi", "0x10"])
def test_bad_quantities_name_the_input(text: str) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity_bytes(text)
    assert quantity_bytes_or_none(text) is None


def test_runtime_prefix_is_stripped() -> None:
    assert strip_runtime_prefix("containerd://abc") == "abc"
    assert strip_runtime_prefix("cri-o://abc") == "abc"
    assert strip_runtime_prefix("docker://abc") == "abc"
    assert strip_runtime_prefix("abc") == "abc"
    assert strip_runtime_prefix("") is None


def test_decode_pod_fields() -> None:
    raw = make_pod(
        containers=[
            {
                "name": "app",
                "resources": {"requests": {"memory": "100Mi"}, "limits": {"memory": "200Mi"}},
            },
            {
                "name": "sidecar",
                "resources": {"requests": {"memory": "10Mi"}, "limits": {"memory": "50Mi"}},
            },
        ],
        statuses=[
            {
                "name": "app",
                "containerID": "containerd://" + "1" * 64,
                "restartCount": 2,
                "state": {
                    "terminated": {
                        "reason": "OOMKilled",
                        "exitCode": 137,
                        "signal": 9,
                        "finishedAt": "2026-11-22T08:00:00Z",
                        "containerID": "containerd://" + "1" * 64,
                    }
                },
                "lastState": {
                    "terminated": {
                        "reason": "Error",
                        "exitCode": 1,
                        "containerID": "containerd://" + "0" * 64,
                    }
                },
            },
        ],
    )
    pod = decode_pod(raw)
    assert (pod.namespace, pod.name, pod.qos_class) == ("shop", "web-7d4b9c8f6d-x2x9z", "burstable")
    assert (pod.owner_kind, pod.owner_name) == ("Deployment", "web")
    assert (pod.pod_memory_request_bytes, pod.pod_memory_limit_bytes) == (110 * 2**20, 250 * 2**20)
    app = pod.container_by_id("0" * 64)
    assert app is not None and app.name == "app" and app.restart_count == 2
    assert app.terminated is not None and app.terminated.signal == 9
    sidecar = pod.container_by_name("sidecar")
    assert sidecar is not None and sidecar.container_id is None  # no status yet


def test_pod_limit_needs_every_container_limited() -> None:
    pod = decode_pod(
        make_pod(
            containers=[
                {"name": "a", "resources": {"limits": {"memory": "1Gi"}}},
                {"name": "b", "resources": {}},
            ]
        )
    )
    assert pod.pod_memory_limit_bytes is None and pod.pod_memory_request_bytes is None


def test_pod_level_resources_win() -> None:
    raw = make_pod()
    raw["spec"]["resources"] = {"limits": {"memory": "2Gi"}, "requests": {"memory": "1Gi"}}
    pod = decode_pod(raw)
    assert (pod.pod_memory_request_bytes, pod.pod_memory_limit_bytes) == (2**30, 2**31)


def test_owner_rules() -> None:
    job = decode_pod(make_pod(owner=("Job", "nightly-29123"), labels={}))
    assert (job.owner_kind, job.owner_name) == ("Job", "nightly-29123")
    bare_rs = decode_pod(make_pod(owner=("ReplicaSet", "manual"), labels={}))
    assert (bare_rs.owner_kind, bare_rs.owner_name) == ("ReplicaSet", "manual")
    none = decode_pod(make_pod(owner=None))
    assert (none.owner_kind, none.owner_name) == (None, None)


def test_static_pod_uses_the_config_hash() -> None:
    pod = decode_pod(make_pod(annotations={"kubernetes.io/config.mirror": "abc123"}))
    assert pod.cgroup_uid == "abc123" and pod.uid != "abc123"


def test_hostile_or_malformed_fields_decode_to_none() -> None:
    raw = make_pod(
        containers=[
            {"name": "app", "resources": {"limits": {"memory": ["x"]}, "requests": "nope"}}
        ],
        statuses=[{"name": "app", "restartCount": "7", "containerID": 5, "state": "running"}],
    )
    raw["status"]["qosClass"] = 3
    pod = decode_pod(raw)
    app = pod.containers[0]
    assert (app.memory_limit_bytes, app.memory_request_bytes) == (None, None)
    assert (app.restart_count, app.container_id, app.terminated) == (None, None, None)
    assert pod.qos_class is None
    with pytest.raises(PodDecodeError):
        decode_pod({"metadata": {"name": "x"}})
