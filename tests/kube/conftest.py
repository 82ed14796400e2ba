"""Fixtures for the Kubernetes tests (the fake API server and a client for it) and the
session-wide RBAC guard.  Helpers live in `fakeapi` and `kube_manifests` (this directory is
on sys.path, as pytest puts it there for a conftest without `__init__.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakeapi import ALL_REQUESTS, FakeApiServer
from kube_manifests import granted_verbs
from kubernetes import client


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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """RBAC guard over the whole run: nothing the client sent may lack a grant."""
    if not ALL_REQUESTS:
        return
    missing = ALL_REQUESTS - granted_verbs(annotate=True)
    if missing:
        print(f"\nRBAC: requests the ClusterRoles do not grant: {sorted(missing)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
