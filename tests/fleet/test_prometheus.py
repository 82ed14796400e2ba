"""`kubectl oomwatch top --prometheus`: a real Prometheus on loopback scrapes two agents'
metrics endpoints (the agent's own `Metrics` sink and server, one per node, fed that node's
kills), and the plugin's range query counts every kill of the window per workload, including
pods no Event names any more (their workload then inferred from the pod name)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import free_port, until
from support.fleet import NODES, Cluster, Pod, incidents, kill, plugin_env
from support.prometheus import PrometheusServer

from oomwatch.sinks.metrics import Metrics

API = Pod("shop", "api-5c9d8f7b6d-q2w3e", "node-a", ("ReplicaSet", "api-5c9d8f7b6d"))


@pytest.fixture
def agents_metrics(cluster: Cluster) -> Iterator[dict[str, tuple[Metrics, int]]]:
    """node -> its agent's metrics (sink and server on a loopback port)."""
    served: dict[str, tuple[Metrics, int]] = {}
    try:
        for node in NODES:
            metrics = Metrics()
            port = metrics.serve("127.0.0.1", free_port(), lambda: True)[1]
            served[node] = (metrics, port)
        yield served
    finally:
        for metrics, _ in served.values():
            metrics.close()


@pytest.fixture
def prometheus(
    prometheus_binary: str, agents_metrics: dict[str, tuple[Metrics, int]], tmp_path: Path
) -> Iterator[PrometheusServer]:
    configs = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"node": node}}
        for node, (_, port) in agents_metrics.items()
    ]
    server = PrometheusServer(
        prometheus_binary, tmp_path, rule_files=[], targets=[], static_configs=configs
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_top_counts_the_window_from_prometheus(
    kubectl: str,
    cluster: Cluster,
    agents_metrics: dict[str, tuple[Metrics, int]],
    prometheus: PrometheusServer,
) -> None:
    kills = incidents(cluster.now)
    # A workload whose Events expired: Prometheus still counts its two kills.
    kills["node-a"] += [kill(API, "node-a", cluster.now - 50 + i) for i in range(2)]
    until(
        "both agents scraped",
        lambda: len(prometheus.query('up{job="oomwatch"} == 1')) == 2 or None,
        60.0,
    )
    first, later = {n: k[:1] for n, k in kills.items()}, {n: k[1:] for n, k in kills.items()}

    def counted(total: int) -> Callable[[], bool | None]:
        def seen() -> bool | None:
            rows = prometheus.query("sum(oomwatch_oom_incidents_total)")
            return float(rows[0]["value"][1]) == total or None if rows else None

        return seen

    emitted = 0
    for batch in (first, later):  # some kills before the first scrape of their series, some after
        for node, node_kills in batch.items():
            for incident in node_kills:
                agents_metrics[node][0].emit(incident)
                emitted += 1
        until(f"{emitted} kills in Prometheus", counted(emitted), 60.0)
    total = sum(len(k) for k in kills.values())
    assert emitted == total

    done = subprocess.run(
        [kubectl, "oomwatch", "top", "--since", "3h", "--prometheus", prometheus.url, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=plugin_env(kubectl, cluster.kubeconfig),
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["prometheus"] and data["bucket_seconds"] == 3600
    rows = {(r["namespace"], r["workload"], r["scope"]): r for r in data["rows"]}
    web = rows[("shop", "Deployment/web", "container")]
    assert web["kills"] == 5 and web["kills_per_bucket"] == [0, 0, 5]
    assert web["nodes"] == ["node-a", "node-b"] and not web["workload_inferred"]
    assert web["findings"]["limit-container"] == 5  # the why, from the Events
    api = rows[("shop", "Deployment/api", "container")]
    assert api["kills"] == 2 and api["workload_inferred"] and api["findings"] == {}
    assert rows[("ml", "StatefulSet/trainer", "container")]["warnings"] == 1
    assert rows[("batch", "Job/etl-28391734", "pod")]["kills"] == 1
    assert rows[("", "Node/node-b", "global")]["kills"] == 1
    assert sum(r["kills"] for r in rows.values()) == total

    table = subprocess.run(
        [kubectl, "oomwatch", "top", "--since", "3h", "--prometheus", prometheus.url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=plugin_env(kubectl, cluster.kubeconfig),
    ).stdout
    assert f"counts: Prometheus ({prometheus.url}), per hour" in table
    assert "~Deployment/api" in table and "workload inferred from pod names" in table
