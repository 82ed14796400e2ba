"""Fixtures for the `kubectl oomwatch` tests: the fake API server (as a user's, outside the
agent's RBAC guard) holding two nodes' agent Events and pods, each node's store, a kubeconfig,
real kubectl 1.33 and the plugin on PATH."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from support.fakeapi import FakeApiServer, kubeconfig
from support.fleet import Cluster, publish

REPO = Path(__file__).resolve().parents[2]
IN_CI = bool(os.environ.get("CI"))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    api = FakeApiServer(guard_rbac=False).start()
    configuration = client.Configuration(host=api.url)
    configuration.retries = 0
    now = time.time()
    try:
        with client.ApiClient(configuration) as api_client:
            stores = publish(api, api_client, now, tmp_path / "stores")
        config_path = tmp_path / "kubeconfig"
        kubeconfig(config_path, api.url, user="me", token="user-token", namespace="shop")
        found = Cluster(api, config_path, stores, now, [])
        yield found
    finally:
        api.stop()


@pytest.fixture(scope="session")
def kubectl() -> str:
    """kubectl 1.33 (dev.sh fetches it into .tools), else PATH's."""
    found = os.environ.get("OOMWATCH_KUBECTL") or shutil.which("kubectl")
    local = REPO / ".tools/kubectl-v33/kubectl/kubectl"
    found = found or (str(local) if local.is_file() else None)
    if found is None:
        if IN_CI:
            pytest.fail("kubectl missing in CI: dev.sh fetches kubectl 1.33")
        pytest.skip("kubectl not found (./dev.sh test fetches kubectl 1.33 into .tools)")
    return found
