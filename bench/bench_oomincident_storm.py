"""A storm of kills of one workload through the agent's real KubeIntegration and the fake API
server, with the writer's default rate (a burst of 3, then one write per 30 s): how many
OOMIncident writes, how long until the object counts every kill, how large it is.

    PYTHONPATH=. python bench/bench_oomincident_storm.py [KILLS]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parents[1] / "tests")]  # `support`

from kubernetes import client  # noqa: E402
from support.fakeapi import NODE, FakeApiServer, make_pod, running_status  # noqa: E402

from oomwatch.diagnosis.history import History  # noqa: E402
from oomwatch.incident import Incident, MemcgUsage, PodContext, Victim  # noqa: E402
from oomwatch.kube import KubeIntegration  # noqa: E402
from oomwatch.kube.oomincident import object_bytes  # noqa: E402

CID = "c" * 64


def main() -> None:
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    api = FakeApiServer().start()
    uid = api.put_pod(make_pod(statuses=[running_status(CID)]))["metadata"]["uid"]
    configuration = client.Configuration(host=api.url)
    configuration.retries = 0
    history = History()
    incidents = []
    for i in range(kills):
        incident = Incident(
            kind="memcg",
            limit_scope="container",
            kernel_time_s=float(i),
            pod_uid=uid,
            container_id=CID,
            wall_time=f"2026-11-26T10:{i // 60 % 60:02d}:{i % 60:02d}+00:00",
            memcg=MemcgUsage(usage_bytes=256 << 20, limit_bytes=256 << 20),
            victims=[Victim(pid=100 + i, comm="python", anon_rss_bytes=250 << 20)],
            k8s=PodContext(namespace="shop", pod="web-7d4b9c8f6d-x2x9z", container="app"),
        )
        incidents.append(history.diagnose(incident))
        history.remember(incidents[-1])
    with client.ApiClient(configuration) as api_client:
        kube = KubeIntegration(
            NODE,
            annotate=False,
            submit=lambda _: None,
            kernel_kills_for=lambda *_: 0,
            api_client=api_client,
        )
        kube.start()
        try:
            api.wait_for(lambda _: kube.enricher.enrich(incidents[0]), timeout_s=10)
            started = time.monotonic()
            for incident in incidents:
                kube.sink.emit(incident)
            api.wait_for(
                lambda a: any(o["kills"] == kills for o in a.oomincidents.values()), timeout_s=120
            )
            took = time.monotonic() - started
        finally:
            kube.stop(timeout_s=2)
    (obj,) = api.oomincidents.values()
    writes = [w for w, _ in api.oomincident_writes]
    print(
        f"{kills} kills -> {len(api.oomincidents)} object, kills={obj['kills']},"
        f" writes={len(writes)} ({', '.join(writes)}), counted all after {took:.2f} s,"
        f" object {object_bytes(obj)} bytes; Events written: {len(api.event_writes)}"
    )
    api.stop()


if __name__ == "__main__":
    main()
