"""Kubernetes-side costs, printed as figures (not a test): run with the project venv.

    .venv/bin/python bench/kube_client.py

- decode: pods decoded per second (a full node: 110 pods, 3 containers each);
- cache: Python heap the pod cache holds for that node;
- enrich: incident enrichment lookups per second against that cache;
- event latency: sink.emit -> Event stored by the fake API server (median, p95);
- outage drain: N Events queued while the API is down, time to deliver after it returns.
"""

from __future__ import annotations

import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # `support`

from kubernetes import client
from support.fakeapi import NODE, FakeApiServer, make_pod

from oomwatch.incident import Incident, MemcgUsage, Victim
from oomwatch.kube import KubeIntegration, decode_pod
from oomwatch.kube.cache import PodCache
from oomwatch.kube.enrich import PodEnricher


def node_pods(n: int = 110) -> list[dict[str, object]]:
    pods = []
    for i in range(n):
        containers = [
            {
                "name": f"c{j}",
                "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "128Mi"}},
            }
            for j in range(3)
        ]
        statuses = [
            {
                "name": f"c{j}",
                "containerID": f"containerd://{i:032x}{j:032x}",
                "restartCount": 0,
                "state": {"running": {}},
            }
            for j in range(3)
        ]
        pods.append(
            make_pod(
                f"pod-{i}",
                uid=f"00000000-0000-0000-0000-{i:012x}",
                containers=containers,
                statuses=statuses,
            )
        )
    return pods


def main() -> None:
    raw = node_pods()
    rounds = 50
    t0 = time.perf_counter()
    for _ in range(rounds):
        decoded = [decode_pod(p) for p in raw]
    decode_s = time.perf_counter() - t0
    print(f"decode: {rounds * len(raw) / decode_s:,.0f} pods/s ({len(raw)} pods, 3 containers)")

    tracemalloc.start()
    cache = PodCache()
    cache.replace([decode_pod(p) for p in raw])
    cache_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"cache: {cache_bytes / 1024:.0f} KiB for {len(raw)} pods")
    enricher = PodEnricher(cache)
    incidents = [
        Incident(kind="memcg", pod_uid=p.uid, container_id=p.containers[2].container_id)
        for p in decoded
    ]
    t0 = time.perf_counter()
    for _ in range(rounds):
        for incident in incidents:
            enricher.enrich(incident)
    enrich_s = time.perf_counter() - t0
    print(f"enrich: {rounds * len(incidents) / enrich_s:,.0f} incidents/s")

    api = FakeApiServer().start()
    for raw_pod in raw[:10]:
        api.put_pod(raw_pod)
    configuration = client.Configuration(host=api.url)
    configuration.retries = 0
    api_client = client.ApiClient(configuration)
    kube = KubeIntegration(
        NODE,
        annotate=False,
        submit=lambda _: None,
        kernel_kills_for=lambda *_: 0,
        api_client=api_client,
        backoff_max_s=0.2,
    )
    kube.start()
    try:
        while len(kube.cache.pods()) < 10:
            time.sleep(0.01)
        latencies = []
        for i in range(200):
            pod = decoded[i % 10]
            incident = Incident(
                kind="memcg",
                kernel_time_s=float(i),
                pod_uid=pod.uid,
                container_id=pod.containers[0].container_id,
                limit_scope="container",
                container_survived=i % 2 == 0,
                memcg=MemcgUsage(usage_bytes=128 << 20, limit_bytes=128 << 20),
                victims=[Victim(pid=i + 100, comm="python")],
            )
            enricher_ok = kube.enricher.enrich(incident)
            assert enricher_ok
            before = len(api.event_writes)
            t0 = time.perf_counter()
            kube.sink.emit(incident)
            api.wait_for(lambda a, n=before: len(a.event_writes) > n)
            latencies.append(time.perf_counter() - t0)
        latencies.sort()
        print(
            f"event latency (emit -> stored, create or series patch, n=200):"
            f" median {statistics.median(latencies) * 1000:.1f} ms,"
            f" p95 {latencies[int(0.95 * len(latencies))] * 1000:.1f} ms"
        )

        queued = 500
        api.go_down()
        for i in range(queued):
            pod = decoded[i % 10]
            incident = Incident(
                kind="memcg",
                kernel_time_s=1e6 + i,
                pod_uid=pod.uid,
                container_id=pod.containers[i % 3].container_id,
                limit_scope="container",
                victims=[Victim(pid=i, comm="w")],
            )
            kube.enricher.enrich(incident)
            kube.sink.emit(incident)
        time.sleep(1.0)
        before = len(api.event_writes)
        api.come_back()
        t0 = time.perf_counter()
        api.wait_for(lambda a: len(a.event_writes) >= before + queued, timeout_s=120)
        drain_s = time.perf_counter() - t0
        print(
            f"outage drain: {queued} queued Events delivered in {drain_s:.2f} s after the API"
            f" returned ({queued / drain_s:,.0f}/s; dropped {kube.publisher.dropped})"
        )
    finally:
        kube.stop(timeout_s=2)
        api.stop()


if __name__ == "__main__":
    main()
