"""A small cluster for the plugin's tests: two nodes, their agents' Events (sent by the real
`KubeIntegration` of each node to the fake API server), their agents' stores, and the pods.

- shop/web (a Deployment): 3 container-limit kills on node-a, 2 on node-b (two pods);
- ml/trainer (a StatefulSet): a MemoryLimitApproaching warning, then its kill, predicted;
- batch/etl (a Job): one kill at the pod limit on node-a;
- node-b ran out as a whole: a global OOM outside any pod (an Event on the Node).
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes import client

from oomwatch.diagnosis import diagnose
from oomwatch.incident import (
    Breakdown,
    ForecastRecord,
    Incident,
    MemcgUsage,
    PodContext,
    Timeline,
    TimelineSample,
    Victim,
    iso_time,
)
from oomwatch.kube import KubeIntegration
from oomwatch.store import IncidentStore
from support import wait_for
from support.fakeapi import FakeApiServer, make_pod, running_status

MIB = 1 << 20
NODES = ("node-a", "node-b")


@dataclass
class Pod:
    namespace: str
    name: str
    node: str
    owner: tuple[str, str] | None
    container: str = "app"
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    cid: str = field(default_factory=lambda: uuid.uuid4().hex * 2)

    def api_object(self) -> dict[str, Any]:
        statuses = [running_status(self.cid, self.container, restarts=1)]
        labels = {"pod-template-hash": self.owner[1].rsplit("-", 1)[-1]} if self.owner else {}
        pod: dict[str, Any] = make_pod(
            self.name,
            self.namespace,
            uid=self.uid,
            node=self.node,
            owner=self.owner,
            statuses=statuses,
            labels=labels,
            containers=[{"name": self.container, "resources": {"limits": {"memory": "256Mi"}}}],
        )
        return pod


WEB_A = Pod("shop", "web-7d4b9c8f6d-x2x9z", "node-a", ("ReplicaSet", "web-7d4b9c8f6d"))
WEB_B = Pod("shop", "web-7d4b9c8f6d-k8s2p", "node-b", ("ReplicaSet", "web-7d4b9c8f6d"))
TRAINER = Pod("ml", "trainer-0", "node-b", ("StatefulSet", "trainer"), container="trainer")
ETL = Pod("batch", "etl-28391734-q7x2v", "node-a", ("Job", "etl-28391734"), container="etl")
PODS = (WEB_A, WEB_B, TRAINER, ETL)
AGENTS = {"node-a": "oomwatch-aaaaa", "node-b": "oomwatch-bbbbb"}


def kill(
    pod: Pod | None,
    node: str,
    t: float,
    *,
    scope: str = "container",
    comm: str = "python",
    **kwargs: Any,
) -> Incident:
    """A kill as the agent stores and publishes it (decoded, attributed, enriched)."""
    memcg = f"/kubepods/burstable/pod{pod.uid}/{pod.cid}" if pod else "/system.slice/cron"
    if scope == "pod" and pod:
        memcg = f"/kubepods/burstable/pod{pod.uid}"
    fields: dict[str, Any] = dict(
        kind="memcg" if pod else "global",
        kernel_time_s=t % 100000,
        wall_time=iso_time(t),
        oom_memcg=memcg if pod else None,
        task_memcg=memcg,
        memcg=MemcgUsage(usage_bytes=256 << 20, limit_bytes=256 << 20) if pod else None,
        breakdown_bytes=Breakdown(anon=250 * MIB, file=2 * MIB, shmem=0, kernel=4 * MIB),
        victims=[Victim(pid=int(t) % 30000 + 100, comm=comm, anon_rss_bytes=250_000 << 10)],
        pod_uid=pod.uid if pod else None,
        container_id=pod.cid if pod and scope != "pod" else None,
        limit_scope=scope if pod else "global",
        node=node,
        container_survived=False,
        k8s=PodContext(
            namespace=pod.namespace,
            pod=pod.name,
            container=pod.container,
            owner_kind=pod.owner[0] if pod.owner else None,
        )
        if pod
        else None,
    )
    fields.update(kwargs)
    return Incident(**fields)


def leak_timeline(t: float) -> Timeline:
    """Five minutes of steady growth to the limit (the trainer's leak)."""
    samples = [
        TimelineSample(
            t - 300 + i,
            (100 + 156 * i // 300) * MIB,
            256 * MIB,
            anon_bytes=(96 + 156 * i // 300) * MIB,
        )
        for i in range(300)
    ]
    return Timeline(samples=samples, interval_seconds=1.0)


def incidents(now: float) -> dict[str, list[Incident]]:
    """Each node's kills, oldest first."""
    trainer_kill = kill(
        TRAINER,
        "node-b",
        now - 200,
        comm="python3",
        timeline=leak_timeline(now - 200),
        forecast=ForecastRecord(
            True, iso_time(now - 450), 250.0, 260.0, 0.82, "high", "anon 250 MiB +532 KiB/s"
        ),
    )
    return {
        "node-a": [kill(WEB_A, "node-a", now - 600 + 60 * i) for i in range(3)]
        + [kill(ETL, "node-a", now - 300, scope="pod", comm="etl")],
        "node-b": [kill(WEB_B, "node-b", now - 500 + 100 * i) for i in range(2)]
        + [trainer_kill, kill(None, "node-b", now - 100, comm="cron")],
    }


def agent_pod(node: str) -> dict[str, Any]:
    pod: dict[str, Any] = make_pod(
        AGENTS[node],
        "oomwatch",
        node=node,
        owner=("DaemonSet", "oomwatch"),
        labels={"app.kubernetes.io/name": "oomwatch"},
        containers=[{"name": "agent"}],
    )
    return pod


def publish(
    api: FakeApiServer, api_client: client.ApiClient, now: float, stores: Path
) -> dict[str, Path]:
    """Put the pods in the API, send every node's Events through its agent's real
    `KubeIntegration`, and fill each node's store; returns node -> state dir."""
    for pod in PODS:
        api.put_pod(pod.api_object())
    for node in NODES:
        api.put_pod(agent_pod(node))
    dirs: dict[str, Path] = {}
    expected = 0
    for node, kills in incidents(now).items():
        kube = KubeIntegration(
            node,
            annotate=False,
            submit=lambda _: None,
            kernel_kills_for=lambda *_: 1,
            api_client=api_client,
            watch_timeout_s=5,
            backoff_max_s=0.4,
            incident_writer_options={"rate_per_s": 50.0},
        )
        kube.start()
        try:
            assert wait_for(partial(_connected, kube), 15.0), node
            if node == "node-b":  # the warning came before the trainer's kill
                note = (
                    "container trainer of pod ml/trainer-0 will reach its 256 MiB memory"
                    " limit in about 4m20s"
                )
                details = {
                    "seconds_to_oom": 260.0,
                    "confidence": 0.82,
                    "limit_bytes": 256 * MIB,
                    "at_s": now - 450,
                }
                kube.warnings.warn(TRAINER.uid, TRAINER.cid, note, details)
                expected += 1
            for incident in kills:  # stored diagnosed, as the agent's pipeline does
                kube.sink.emit(diagnose(incident))
            expected += len({(i.pod_uid, i.limit_scope) for i in kills})
            delivered = wait_for(partial(_delivered, kube), 15.0)
            assert delivered, f"{node}: the fake cluster's Events were not all delivered"
            assert wait_for(partial(_written, kube), 15.0), f"{node}: OOMIncidents not written"
        finally:
            kube.stop(timeout_s=5)
        dirs[node] = stores / node
        store = IncidentStore(dirs[node])
        for incident in kills:
            store.add(incident)
        store.close()
    assert len(api.events) == expected, sorted(api.events)
    return dirs


def _connected(kube: KubeIntegration) -> bool:
    return kube.cache.synced and kube.connected


def _written(kube: KubeIntegration) -> bool:
    return (
        kube.incidents is not None and kube.incidents.pending() == 0 and kube.incidents.writes > 0
    )


def _delivered(kube: KubeIntegration) -> bool:
    return kube.publisher.pending() == 0 and kube.publisher.delivered > 0


@dataclass
class Cluster:
    api: FakeApiServer
    kubeconfig: Path
    stores: dict[str, Path]
    now: float
    execs: list[tuple[str, str, str, list[str]]]


def plugin_env(kubectl: str, kubeconfig: Path) -> dict[str, str]:
    """kubectl finds `kubectl-oomwatch` on PATH (this venv's bin); the plugin finds kubectl."""
    path = os.pathsep.join(
        [str(Path(sys.executable).parent), str(Path(kubectl).parent), os.environ.get("PATH", "")]
    )
    return {**os.environ, "PATH": path, "KUBECONFIG": str(kubeconfig), "KUBECTL": kubectl}
