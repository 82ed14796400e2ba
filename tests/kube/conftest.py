"""Fixtures for the Kubernetes tests (the fake API server, a client for it, a started
`KubeIntegration`) and the session-wide RBAC guard.  Helpers live in `support.fakeapi`,
`support.kube_scenario` and `support.manifests`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from support.fakeapi import ALL_REQUESTS, NODE, FakeApiServer
from support.manifests import granted_verbs

from oomwatch.incident import Incident
from oomwatch.kube import KubeIntegration


@pytest.fixture
def fake_api() -> Iterator[FakeApiServer]:
    api = FakeApiServer().start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def api_client(fake_api: FakeApiServer) -> Iterator[client.ApiClient]:
    configuration = client.Configuration(host=fake_api.url)
    configuration.retries = 0  # fail fast while the fake server is "down"
    with client.ApiClient(configuration) as api:
        yield api


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
        kube = KubeIntegration(
            NODE,
            annotate=annotate,
            submit=sink.append,
            kernel_kills_for=kills,
            api_client=api_client,
            verify_delay_s=kwargs.pop("verify_delay_s", 0.2),
            watch_timeout_s=kwargs.pop("watch_timeout_s", 5),
            backoff_max_s=0.4,
            **kwargs,
        )
        kube.start()
        started.append(kube)
        return kube

    yield make
    for kube in started:
        kube.stop(timeout_s=2)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """RBAC guard over the whole run: nothing the client sent may lack a grant."""
    if not ALL_REQUESTS:
        return
    missing = ALL_REQUESTS - granted_verbs(annotate=True)
    if missing:
        print(f"\nRBAC: requests the ClusterRoles do not grant: {sorted(missing)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
