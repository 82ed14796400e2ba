"""The metrics sink, scraped over HTTP as Prometheus would, and its health endpoint."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from support.clock import FakeClock
from support.prometheus import Samples, parsed_samples

from oomwatch import __version__
from oomwatch.diagnosis import diagnose
from oomwatch.incident import (
    Attribution,
    AttributionCandidate,
    Breakdown,
    Incident,
    MemcgUsage,
    PodContext,
    Victim,
)
from oomwatch.sinks.metrics import Metrics, SeriesLabels

UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
IDS = {
    "namespace": "ml",
    "pod": "trainer-0",
    "container": "main",
    "pod_uid": UID,
    "workload": "",
    "workload_type": "",
}
EMPTY = {
    "namespace": "",
    "pod": "",
    "container": "",
    "pod_uid": "",
    "workload": "",
    "workload_type": "",
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(now=1_700_000_000.0)


@pytest.fixture
def served(clock: FakeClock) -> Iterator[tuple[Metrics, str, list[bool]]]:
    metrics = Metrics(clock=clock, gauge_grace_s=60.0, counter_grace_s=600.0)
    healthy = [True]
    host, port = metrics.serve("127.0.0.1", 0, lambda: healthy[0])
    yield metrics, f"http://{host}:{port}", healthy
    metrics.close()


def _scrape(base: str) -> Samples:
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return parsed_samples(resp.read())


def _kill(**overrides: object) -> Incident:
    incident = Incident(
        kind="memcg",
        limit_scope="container",
        pod_uid=UID,
        k8s=PodContext(namespace="ml", pod="trainer-0", container="main"),
        wall_time="2026-11-22T08:00:00+00:00",
        victims=[Victim(pid=4242, comm="python3")],
    )
    for key, value in overrides.items():
        setattr(incident, key, value)
    return incident


def test_kill_counters_over_http(served: tuple[Metrics, str, list[bool]]) -> None:
    metrics, base, _ = served
    metrics.emit(_kill())
    metrics.emit(
        _kill(
            group_kill=True,
            victims=[Victim(pid=1, comm="a"), Victim(pid=2, comm="b"), Victim(pid=3, comm="c")],
        )
    )
    metrics.emit(_kill(container_survived=True, kmsg_missing=True, victims=[]))
    metrics.emit(_kill(kind="global", limit_scope="global", pod_uid=None, k8s=None))
    metrics.emit(_kill(wall_time="2026-11-22T07:00:00+00:00"))  # an older kill, seen late
    metrics.add_kmsg_lost(7)
    metrics.add_reports_suppressed(2)
    scraped = _scrape(base)
    sure = {"attribution": "certain"}
    kills = scraped["oomwatch_oom_kills_total"]
    assert (dict(IDS, kind="memcg", scope="container", **sure), 6.0) in kills
    assert (dict(EMPTY, kind="global", scope="global", **sure), 1.0) in kills
    # one incident per kill of the container: the 3-process group kill counts once
    incidents = scraped["oomwatch_oom_incidents_total"]
    assert (dict(IDS, kind="memcg", scope="container", **sure), 4.0) in incidents
    assert (dict(EMPTY, kind="global", scope="global", **sure), 1.0) in incidents
    assert scraped["oomwatch_group_oom_kills_total"] == [(IDS, 1.0)]
    assert scraped["oomwatch_child_process_oom_kills_total"] == [(IDS, 1.0)]
    assert scraped["oomwatch_kmsg_records_lost_total"] == [({}, 7.0)]
    assert scraped["oomwatch_oom_reports_suppressed_total"] == [({}, 3.0)]
    assert scraped["oomwatch_last_oom_kill_timestamp_seconds"] == [({}, 1_795_334_400.0)]
    assert scraped["oomwatch_build_info"] == [({"version": __version__}, 1.0)]


def test_an_ambiguous_kill_is_counted_on_no_pod(served: tuple[Metrics, str, list[bool]]) -> None:
    """Two candidates: the kill is counted, with empty identity labels and `ambiguous`, so
    no alert names a pod that may be innocent (and one series for all such kills)."""
    metrics, base, _ = served
    candidates = [
        AttributionCandidate("/kubepods/pod1/a", "1"),
        AttributionCandidate("/kubepods/pod2/b", "2"),
    ]
    for _ in range(2):
        metrics.emit(
            _kill(
                pod_uid=None,
                k8s=None,
                limit_scope=None,
                attribution=Attribution("counter", "ambiguous", candidates, "two counters rose"),
            )
        )
    scraped = _scrape(base)
    assert scraped["oomwatch_oom_kills_total"] == [
        (dict(EMPTY, kind="memcg", scope="", attribution="ambiguous"), 2.0)
    ]


def test_framework_ooms_and_non_kernel_kinds(served: tuple[Metrics, str, list[bool]]) -> None:
    metrics, base, _ = served
    metrics.emit(_kill(kind="framework", victims=[], allocator={"framework": "torch-cuda"}))
    metrics.emit(_kill(kind="framework", victims=[], allocator={"framework": "x" * 300}))
    metrics.emit(_kill(kind="eviction", victims=[]))
    scraped = _scrape(base)
    assert sorted(scraped["oomwatch_framework_oom_total"], key=str) == sorted(
        [(dict(IDS, framework="torch-cuda"), 1.0), (dict(IDS, framework=""), 1.0)], key=str
    )
    assert "oomwatch_oom_kills_total" not in scraped


def test_process_names_never_become_labels(served: tuple[Metrics, str, list[bool]]) -> None:
    metrics, base, _ = served
    hostile = 'x",pod="forged\nnamespace="kube-system'
    metrics.emit(_kill(victims=[Victim(pid=9, comm=hostile)]))
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert "forged" not in text and "kube-system" not in text


def test_memory_gauges_and_stale_series_are_forgotten(
    served: tuple[Metrics, str, list[bool]], clock: FakeClock
) -> None:
    metrics, base, _ = served
    labels = SeriesLabels(**IDS)
    metrics.set_container_memory(labels, usage_bytes=200 << 20, limit_bytes=256 << 20)
    gone = SeriesLabels("ml", "old-0", "main", "11111111-2222-3333-4444-555555555555")
    old = PodContext("ml", "old-0", "main")
    assert SeriesLabels.of(_kill(pod_uid=gone.pod_uid, k8s=old)) == gone
    metrics.set_container_memory(gone, usage_bytes=1, limit_bytes=None)  # unlimited: no limit
    metrics.emit(_kill(pod_uid=gone.pod_uid, k8s=PodContext("ml", "old-0", "main")))
    scraped = _scrape(base)
    assert (IDS, float(200 << 20)) in scraped["oomwatch_container_memory_usage_bytes"]
    # no inactive file known: the working set is the usage
    assert (IDS, float(200 << 20)) in scraped["oomwatch_container_memory_working_set_bytes"]
    assert scraped["oomwatch_container_memory_limit_bytes"] == [(IDS, float(256 << 20))]

    clock.now += 120  # past the gauge grace: only the live container is refreshed
    metrics.set_container_memory(labels, usage_bytes=210 << 20, limit_bytes=256 << 20)
    assert metrics.forget_stale() == 2  # the gone container's usage and working set
    scraped = _scrape(base)
    assert scraped["oomwatch_container_memory_usage_bytes"] == [(IDS, float(210 << 20))]
    assert scraped["oomwatch_container_memory_working_set_bytes"] == [(IDS, float(210 << 20))]
    assert any(lab["pod"] == "old-0" for lab, _ in scraped["oomwatch_oom_kills_total"])

    clock.now += 1200  # past the counter grace too
    metrics.set_container_memory(labels, usage_bytes=210 << 20, limit_bytes=256 << 20)
    assert metrics.forget_stale() == 2  # its kill and incident counters
    scraped = _scrape(base)
    assert "oomwatch_oom_kills_total" not in scraped
    assert "oomwatch_oom_incidents_total" not in scraped
    assert scraped["oomwatch_container_memory_usage_bytes"] == [(IDS, float(210 << 20))]


def test_a_limit_lifted_and_set_again(served: tuple[Metrics, str, list[bool]]) -> None:
    """The limit series is absent while the container is unlimited, back when a limit is."""
    metrics, base, _ = served
    labels = SeriesLabels(**IDS)
    metrics.set_container_memory(labels, usage_bytes=1 << 20, limit_bytes=8 << 20)
    metrics.set_container_memory(labels, usage_bytes=2 << 20, limit_bytes=None)
    scraped = _scrape(base)
    assert "oomwatch_container_memory_limit_bytes" not in scraped
    assert scraped["oomwatch_container_memory_usage_bytes"] == [(IDS, float(2 << 20))]
    metrics.set_container_memory(labels, usage_bytes=3 << 20, limit_bytes=16 << 20)
    assert _scrape(base)["oomwatch_container_memory_limit_bytes"] == [(IDS, float(16 << 20))]


def test_working_set_workload_labels_findings_and_no_created_series(
    served: tuple[Metrics, str, list[bool]],
) -> None:
    """`ContainerMemoryNearLimit` reads the working set (usage minus inactive file cache), not
    usage with its page cache; the owner is a label; findings are counted by code; and no
    counter has a `_created` twin."""
    metrics, base, _ = served
    web = PodContext(
        "shop", "web-7d4b9c8f6d-x2x9z", "app", owner_kind="Deployment", owner_name="web"
    )
    kill = diagnose(
        _kill(
            k8s=web,
            memcg=MemcgUsage(usage_bytes=256 << 20, limit_bytes=256 << 20),
            breakdown_bytes=Breakdown(anon=40 << 20, file=210 << 20, shmem=200 << 20),
        )
    )
    metrics.emit(kill)
    labels = SeriesLabels.of(kill)
    assert (labels.workload, labels.workload_type) == ("web", "deployment")
    metrics.set_container_memory(labels, 900 << 20, 1 << 30, working_set_bytes=300 << 20)
    scraped = _scrape(base)
    ids = dict(labels._asdict())
    assert scraped["oomwatch_container_memory_working_set_bytes"] == [(ids, float(300 << 20))]
    assert scraped["oomwatch_container_memory_usage_bytes"] == [(ids, float(900 << 20))]
    assert (
        {lab["finding"] for lab, _ in scraped["oomwatch_oom_findings_total"]}
        == {f.code for f in kill.findings}
        == {"limit-container", "tmpfs-shmem"}
    )
    assert not [name for name in scraped if name.endswith("_created")]


def test_healthz_follows_the_health_callable(served: tuple[Metrics, str, list[bool]]) -> None:
    _, base, healthy = served
    with urllib.request.urlopen(base + "/healthz", timeout=5) as resp:
        assert resp.status == 200
    healthy[0] = False
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base + "/healthz", timeout=5)
    assert err.value.code == 503
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(base + "/other", timeout=5)
    assert err.value.code == 404


def test_a_raising_health_check_is_unhealthy() -> None:
    metrics = Metrics()

    def broken() -> bool:
        raise RuntimeError("kube client down")

    host, port = metrics.serve("127.0.0.1", 0, broken)
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5)
        assert err.value.code == 503
    finally:
        metrics.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::1"])
def test_close_stops_the_sleeping_accept_loop_and_frees_the_port(host: str) -> None:
    """The server sleeps in accept (no 0.5 s shutdown poll); close() wakes and stops it."""
    metrics = Metrics()
    try:
        bound_host, port = metrics.serve(host, 0, lambda: True)
    except OSError as exc:  # a host without IPv6
        pytest.skip(f"cannot bind {host}: {exc}")
    target = {"0.0.0.0": "127.0.0.1"}.get(bound_host, bound_host)
    url = f"http://[{target}]:{port}" if ":" in target else f"http://{target}:{port}"
    with urllib.request.urlopen(url + "/healthz", timeout=5) as resp:
        assert resp.status == 200
    threads = {t.name for t in threading.enumerate()}
    assert "oomwatch-metrics" in threads
    metrics.close()
    assert "oomwatch-metrics" not in {t.name for t in threading.enumerate()}
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/healthz", timeout=2)
