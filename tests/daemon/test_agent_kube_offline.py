"""`oomwatch run` with a cluster: the real Kubernetes wiring against a local fake API server.

No --standalone and a kubeconfig pointing at the kube engineer's fake API server: the agent
must find the cluster, name the pod of a kill from its cgroup, and publish an Event.  The kill
comes through a FIFO and a cgroup v2 file tree, as in `test_agent_offline`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kubernetes.config import kube_config
from support import wait_for
from support.agent import agent_thread
from support.cgroupfs import memory_events
from support.fakeapi import NODE, FakeApiServer, kubeconfig, make_pod, running_status
from support.host import CONTAINER, POD_UID, REPORT, config_for, fake_host
from support.store import stored

CONTAINER_ID = CONTAINER.rsplit("/", 1)[1]


def test_kill_gets_pod_names_and_an_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApiServer().start()
    try:
        api.put_pod(
            make_pod(
                "trainer-0",
                "ml",
                uid=POD_UID,
                statuses=[running_status(CONTAINER_ID)],
            )
        )
        config_path = kubeconfig(tmp_path / "kubeconfig", api.url, token="not-a-secret")
        monkeypatch.setenv("KUBECONFIG", str(config_path))
        # The client reads KUBECONFIG once, at import: another test may have imported it.
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config_path))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        container_dir, writer, log = fake_host(tmp_path)
        config = config_for(tmp_path, node_name=NODE, standalone=False, enrich_wait_s=5.0)
        try:
            with agent_thread(config) as agent:
                assert agent.kube is not None, f"standalone: {log.getvalue()}"
                api.wait_for(lambda a: len(a.watch_versions) >= 1)  # listed, now watching pods
                os.write(writer, REPORT)
                (container_dir / "memory.events").write_text(memory_events(1, 1))
                assert wait_for(lambda: len(stored(config.state_dir)) == 1, 8.0)
                [kill] = stored(config.state_dir)
                assert kill.k8s is not None
                names = (kill.k8s.namespace, kill.k8s.pod, kill.k8s.container)
                assert names == ("ml", "trainer-0", "app")
                api.wait_for(lambda a: len(a.events) == 1, timeout_s=10.0)
                [event] = api.events.values()
                assert event["regarding"]["uid"] == POD_UID
        finally:
            os.close(writer)
    finally:
        api.stop()
