"""The fake API server answers each resource the way the official client expects, refuses
what RBAC and the schemas would, and goes down and comes back."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from support.fakeapi import NODE, FakeApiServer, kubeconfig, make_pod


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(guard_rbac=False).start()
    try:
        yield server
    finally:
        server.stop()


def _get(api: FakeApiServer, path: str, **headers: str) -> tuple[int, Any]:
    request = urllib.request.Request(api.url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return int(reply.status), json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_pods_are_listed_got_and_merge_patched_through_the_official_client(
    api: FakeApiServer,
) -> None:
    api.put_pod(make_pod("web-0", "shop"))
    api.put_pod(make_pod("elsewhere", "shop", node="node-b"))
    with client.ApiClient(client.Configuration(host=api.url)) as raw:
        core = client.CoreV1Api(raw)
        listed = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}")
        assert [p.metadata.name for p in listed.items if p.metadata] == ["web-0"]
        patch = {"metadata": {"annotations": {"a": "b"}}}
        core.patch_namespaced_pod(
            "web-0", "shop", patch, _content_type="application/merge-patch+json"
        )
        meta = core.read_namespaced_pod("web-0", "shop").metadata
        assert meta is not None and meta.annotations == {"a": "b"}
    assert ("patch", "", "pods") in api.seen()


def test_the_kubeconfig_points_the_official_client_at_the_server(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """The client that loads it, as the agent does, talks to this server with the token given;
    the context names the namespace."""
    api.put_pod(make_pod("web-0", "shop"))
    path = kubeconfig(tmp_path / "kubeconfig", api.url, user="me", token="t0k", namespace="shop")
    raw: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(path)
    )
    with raw:
        assert raw.configuration.host == api.url
        assert list(raw.configuration.api_key.values()) == ["Bearer t0k"]
        listed = client.CoreV1Api(raw).list_namespaced_pod("shop")
    assert [p.metadata.name for p in listed.items if p.metadata] == ["web-0"]
    [context] = json.loads(path.read_text())["contexts"]
    assert context["context"] == {"cluster": "fake", "user": "me", "namespace": "shop"}


def test_an_invalid_event_is_refused_as_the_api_server_would(api: FakeApiServer) -> None:
    body = {"metadata": {"name": "e1"}, "type": "Normal", "reason": "Test"}  # no eventTime
    request = urllib.request.Request(
        api.url + "/apis/events.k8s.io/v1/namespaces/shop/events",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 422 and b"eventTime" in refused.value.read()
    assert api.events == {}


def test_oomincidents_and_discovery_follow_the_crd(api: FakeApiServer) -> None:
    assert _get(api, "/apis/oomwatch.io/v1alpha1/namespaces/shop/oomincidents/x")[0] == 404
    status, groups = _get(api, "/apis")
    assert status == 200 and "oomwatch.io" in [g["name"] for g in groups["groups"]]
    without = FakeApiServer(crd_installed=False).start()
    try:
        assert _get(without, "/apis/oomwatch.io/v1alpha1/namespaces/shop/oomincidents")[0] == 404
    finally:
        without.stop()


def test_a_user_without_a_grant_is_forbidden(api: FakeApiServer) -> None:
    api.users["viewer"] = {("list", "", "events", "shop")}
    assert _get(api, "/api/v1/namespaces/shop/events", **{"Impersonate-User": "viewer"})[0] == 200
    status, body = _get(api, "/api/v1/namespaces/ml/events", **{"Impersonate-User": "viewer"})
    assert (status, body["reason"]) == (403, "Forbidden")


def test_down_refuses_connections_and_back_serves_the_same_state(api: FakeApiServer) -> None:
    api.put_pod(make_pod("web-0", "shop"))
    api.go_down()
    with pytest.raises(OSError):
        _get(api, "/api/v1/namespaces/shop/pods/web-0")
    api.come_back()
    status, pod = _get(api, "/api/v1/namespaces/shop/pods/web-0")
    assert (status, pod["metadata"]["name"]) == (200, "web-0")
