"""API outages, retries, rejections and the bounded queue: Events are late, never lost or raised."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from support.fakeapi import NODE, FakeApiServer
from support.kube_scenario import (
    POD_REF,
    app_pod,
    enriched,
    event_for,
    kill,
    wait,
)

from oomwatch.kube import KubeIntegration


def test_events_wait_out_an_outage_and_arrive_in_order(
    fake_api: FakeApiServer,
    make_kube: Callable[..., KubeIntegration],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    first = enriched(kube, kill(pid=1, t=1.0))
    second = enriched(kube, kill(pid=2, t=2.0, container_survived=True))
    fake_api.go_down()
    connects: list[str] = []
    connect = socket.socket.connect

    def noted(sock: socket.socket, address: Any) -> None:
        connects.append(threading.current_thread().name)
        connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", noted)
    caller = threading.current_thread().name
    kube.sink.emit(first)
    kube.sink.emit(second)
    assert caller not in connects  # emit only queues: the pipeline's thread never waits on the API
    assert wait(lambda: not kube.publisher.reachable)  # it tried, and the API is down
    assert connects and caller not in connects  # the publisher's thread tried
    assert kube.publisher.pending() == 2
    fake_api.come_back()
    fake_api.wait_for(lambda api: len(api.events) == 2)
    reasons = [b["reason"] for op, b in fake_api.event_writes]
    assert reasons == ["ContainerOOMKill", "ChildProcessOOMKilled"]
    wait(lambda: kube.publisher.pending() == 0)
    assert kube.publisher.dropped == 0


def test_stop_sends_what_is_queued_first(
    fake_api: FakeApiServer, api_client: client.ApiClient
) -> None:
    fake_api.put_pod(app_pod())
    kube = KubeIntegration(
        NODE,
        annotate=False,
        submit=lambda _: None,
        kernel_kills_for=lambda *_: 0,
        api_client=api_client,
    )
    kube.start()
    incidents = [
        enriched(kube, kill(pid=i, t=float(i), container_survived=i % 2 == 1)) for i in range(2)
    ]
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
    assert wait(lambda: not kube.publisher.reachable)
    assert kube.publisher.pending() == 1 and not fake_api.event_writes
    fake_api.come_back()
    (body,) = event_for(fake_api)
    assert body["regarding"] == POD_REF and body["reason"] == "ContainerOOMKill"


def test_503_and_429_are_retried(
    fake_api: FakeApiServer, make_kube: Callable[..., KubeIntegration]
) -> None:
    fake_api.put_pod(app_pod())
    kube = make_kube()
    incident = enriched(kube, kill())
    fake_api.fail_next += [("create", 503), ("create", 429)]
    kube.sink.emit(incident)
    event_for(fake_api)
    creates = [r for r in fake_api.requests if r[0] == "create" and r[2] == "events"]
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
    incidents = [
        enriched(kube, kill(pid=i, t=float(i), container_survived=i % 2 == 0)) for i in range(6)
    ]
    fake_api.go_down()
    for incident in incidents:
        kube.sink.emit(incident)
    assert kube.publisher.pending() == 3 and kube.publisher.dropped == 3
    fake_api.come_back()
    fake_api.wait_for(lambda api: len(api.event_writes) == 3)
