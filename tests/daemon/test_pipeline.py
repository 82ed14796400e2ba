"""The pipeline from decoded incidents to stored, published ones (no kernel: fakes at the edges)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from oomwatch.daemon.pipeline import Pipeline, container_cgroup
from oomwatch.daemon.reconcile import CounterKills
from oomwatch.incident import Incident, PodContext, Timeline, Victim
from oomwatch.sinks.log import LogSink, setup_logging
from oomwatch.store import IncidentStore

UID = "0f3c2a8e-1b2d-4c5e-9f10-112233445566"
CID = "a" * 64
CTR = f"/kubepods/burstable/pod{UID}/{CID}"


class Clock:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = 1_800_000_000.0

    def advance(self, s: float) -> None:
        self.mono += s
        self.wall += s


class Collect:
    def __init__(self) -> None:
        self.got: list[Incident] = []

    def emit(self, incident: Incident) -> None:
        self.got.append(incident)

    def close(self) -> None:
        pass


class Broken:
    def emit(self, incident: Incident) -> None:
        raise RuntimeError("sink down")

    def close(self) -> None:
        pass


class SlowPodLookup:
    """Like the Kubernetes enricher: not ready until the pod shows up in the cache."""

    def __init__(self, ready_after: int) -> None:
        self.calls = 0
        self.ready_after = ready_after

    def enrich(self, incident: Incident) -> bool:
        self.calls += 1
        if self.calls < self.ready_after:
            return False
        incident.k8s = PodContext(namespace="shop", pod="web-1", container="app")
        return True


def memcg_kill(pid: int, t: float, cgroup: str = CTR) -> Incident:
    return Incident(
        kind="memcg",
        kernel_time_s=t,
        oom_memcg=cgroup,
        task_memcg=cgroup,
        victims=[Victim(pid=pid, comm="java")],
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(tmp_path: Path, clock: Clock, **kw: object) -> tuple[Pipeline, Collect]:
    sink = Collect()
    sinks = [Broken(), sink]
    pipe = Pipeline(
        store=IncidentStore(tmp_path),
        sinks=sinks,
        boot_id="boot-1",
        node="node-a",
        wall_clock=lambda: clock.wall,
        mono_clock=lambda: clock.mono,
        **kw,  # type: ignore[arg-type]
    )
    return pipe, sink


def test_kill_is_annotated_observed_stored_and_published_once(
    tmp_path: Path, clock: Clock
) -> None:
    seen: list[tuple[str, frozenset[int]]] = []

    def survived(rel: str, victims: frozenset[int]) -> bool:
        seen.append((rel, victims))
        return True

    def timeline_for(rel: str, at_s: float) -> Timeline:
        return Timeline(peak_bytes=42, usage_at_kill_bytes=int(at_s))

    pipe, sink = make(tmp_path, clock, survived=survived, timeline_for=timeline_for)
    pipe.process([memcg_kill(7, 99.5)])
    [got] = sink.got
    assert got.pod_uid == UID and got.container_id == CID and got.limit_scope == "container"
    assert got.boot_id == "boot-1" and got.node == "node-a"
    assert got.container_survived is True and seen == [(CTR, frozenset({7}))]
    # kernel stamp 0.5 s before "now" -> wall time 0.5 s before the wall clock
    assert got.timeline is not None and got.timeline.usage_at_kill_bytes == int(clock.wall - 0.5)
    assert pipe.store.query()[0].container_survived is True
    # the same kill read again after a restart is not stored or published twice
    pipe.process([memcg_kill(7, 99.5)])
    assert len(sink.got) == 1 and pipe.stats.duplicates == 1
    assert pipe.stats.errors >= 1  # the broken sink was logged, not raised


def test_container_cgroup_walks_up_from_a_sub_cgroup() -> None:
    assert container_cgroup(CTR + "/container") == CTR
    assert container_cgroup(CTR) == CTR
    assert container_cgroup("/oomwatch-lab/plain") == "/oomwatch-lab/plain"


def test_enricher_not_ready_defers_then_stores_with_pod_names(
    tmp_path: Path, clock: Clock
) -> None:
    lookup = SlowPodLookup(ready_after=3)
    pipe, sink = make(tmp_path, clock, enrichers=[lookup], enrich_wait_s=5.0)
    pipe.process([memcg_kill(7, 99.9)])
    assert sink.got == [] and pipe.holding
    clock.advance(1.0)
    pipe.process()
    assert sink.got == []
    clock.advance(1.0)
    pipe.process()
    [got] = sink.got
    assert got.k8s is not None and got.k8s.pod == "web-1" and not pipe.holding


def test_enricher_that_never_answers_is_bounded(tmp_path: Path, clock: Clock) -> None:
    pipe, sink = make(tmp_path, clock, enrichers=[SlowPodLookup(ready_after=10**9)],
                      enrich_wait_s=2.0)
    pipe.process([memcg_kill(7, 99.9)])
    clock.advance(2.5)
    pipe.process()
    assert len(sink.got) == 1 and sink.got[0].k8s is None


def test_counted_kill_without_report_is_stored_as_kmsg_missing(
    tmp_path: Path, clock: Clock
) -> None:
    pipe, sink = make(tmp_path, clock, survived=lambda rel, v: False)
    pipe.process([], [CounterKills(CTR, 1, clock.mono)])
    clock.advance(3.0)
    pipe.process()
    [got] = sink.got
    assert got.kmsg_missing and got.pod_uid == UID and got.container_survived is False
    assert got.boot_id == "boot-1"


def test_drain_at_shutdown_stores_waiting_bare_kill(tmp_path: Path, clock: Clock) -> None:
    pipe, sink = make(tmp_path, clock)
    bare = Incident(kind="memcg", kernel_time_s=99.0, header_suppressed=True,
                    victims=[Victim(pid=5, comm="w")])
    pipe.process([bare])
    assert sink.got == [] and pipe.holding
    pipe.drain()
    assert len(sink.got) == 1 and not pipe.holding


def test_log_line_fields_and_escaping(tmp_path: Path, clock: Clock) -> None:
    out = io.StringIO()
    setup_logging("json", stream=out)
    pipe = Pipeline(store=IncidentStore(tmp_path), sinks=[LogSink()], boot_id="b", node="n",
                    wall_clock=lambda: clock.wall, mono_clock=lambda: clock.mono)
    evil = memcg_kill(8, 99.0)
    evil.victims[0].comm = "x\n{\"event\": \"oom_kill\"}\x1b[2J"
    pipe.process([evil])
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    [line] = [entry for entry in lines if entry["event"] == "oom_kill"]
    assert line["pod_uid"] == UID and line["container_id"] == CID
    assert line["victim_pid"] == 8 and line["limit_scope"] == "container"
    assert line["victim_comm"].startswith("x\\x0a") and "\x1b" not in line["victim_comm"]
    for key in ("group_kill", "container_survived", "kmsg_missing", "usage_bytes", "breakdown"):
        assert key in line
