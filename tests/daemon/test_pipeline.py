"""The pipeline from decoded incidents to stored, published ones (no kernel: fakes at the edges)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.cgroup_view import FakeCgroupView
from support.clock import FakeClock
from support.sinks import BrokenSink, CollectingSink

from oomwatch.cgroup_identity import container_cgroup
from oomwatch.cgroups.ring import FrozenRing
from oomwatch.cgroups.timeline_snapshot import TimelineSnapshot
from oomwatch.daemon.cgroup_view import CgroupView
from oomwatch.daemon.checkpoint import pending_reconcile
from oomwatch.daemon.observe import SURVIVAL_RECHECK_S
from oomwatch.daemon.pipeline import Pipeline
from oomwatch.incident import (
    Incident,
    MemcgUsage,
    PodContext,
    Timeline,
    TimelineSample,
    Victim,
    iso_epoch_s,
)
from oomwatch.reconcile import SETTLE_S, CgroupNews, CounterKills, ReconcileState
from oomwatch.sinks.log import LogSink, setup_logging
from oomwatch.stages import Sink
from oomwatch.store import Checkpoint, IncidentStore

MiB = 1 << 20

UID = "0f3c2a8e-1b2d-4c5e-9f10-112233445566"
CID = "a" * 64
CTR = f"/kubepods/burstable/pod{UID}/{CID}"


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
def clock() -> FakeClock:
    return FakeClock(now=100.0, wall_s=1_800_000_000.0)


def make(tmp_path: Path, clock: FakeClock, **kw: object) -> tuple[Pipeline, CollectingSink]:
    sink = CollectingSink()
    sinks: list[Sink] = [BrokenSink(), sink]
    pipe = Pipeline(
        store=IncidentStore(tmp_path),
        sinks=sinks,
        boot_id="boot-1",
        node="node-a",
        wall_clock=clock.wall,
        mono_clock=clock,
        **kw,  # type: ignore[arg-type]
    )
    return pipe, sink


def test_kill_is_annotated_observed_stored_and_published_once(
    tmp_path: Path, clock: FakeClock
) -> None:
    seen: list[tuple[str, frozenset[int]]] = []

    def survived(rel: str, victims: frozenset[int]) -> bool:
        seen.append((rel, victims))
        return True

    def timeline_for(rel: str, at_s: float) -> Timeline:
        return Timeline(peak_bytes=42, usage_at_kill_bytes=int(at_s))

    pipe, sink = make(tmp_path, clock)
    view = FakeCgroupView(survived_for=survived, freeze=timeline_for)
    pipe.process([memcg_kill(7, 99.5)], view=view)
    assert sink.got == [] and pipe.holding  # survivors are looked at once more, a bit later
    clock.advance(SURVIVAL_RECHECK_S)
    pipe.process()
    [got] = sink.got
    assert got.pod_uid == UID and got.container_id == CID and got.limit_scope == "container"
    assert got.boot_id == "boot-1" and got.node == "node-a"
    assert got.container_survived is True and seen == [(CTR, frozenset({7}))] * 2
    # kernel stamp 0.5 s before the first "now" -> wall time 0.5 s before that wall clock
    kill_wall = clock.wall_s - SURVIVAL_RECHECK_S - 0.5
    assert got.timeline is not None and got.timeline.usage_at_kill_bytes == int(kill_wall)
    assert pipe.store.query()[0].container_survived is True
    # the same kill read again after a restart is not stored or published twice
    pipe.process([memcg_kill(7, 99.5)])
    clock.advance(SURVIVAL_RECHECK_S)
    pipe.process()
    assert len(sink.got) == 1 and pipe.stats.duplicates == 1
    assert pipe.stats.errors >= 1  # the broken sink was logged, not raised


def test_peers_of_a_killed_pid_1_still_exiting_are_no_survivors(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Right after the kill the namespace peers are still listed; a moment later they are gone."""
    answers = [True, False]
    pipe, sink = make(tmp_path, clock)
    view = FakeCgroupView(survived_for=lambda rel, victims: answers.pop(0))
    pipe.process([memcg_kill(7, 99.9)], view=view)
    clock.advance(SURVIVAL_RECHECK_S / 2)
    pipe.process()
    assert sink.got == []  # not due yet: the kmsg loop is not blocked meanwhile
    clock.advance(SURVIVAL_RECHECK_S / 2)
    pipe.process()
    [got] = sink.got
    assert got.container_survived is False and answers == []


def test_container_cgroup_walks_up_from_a_sub_cgroup() -> None:
    assert container_cgroup(CTR + "/container") == CTR
    assert container_cgroup(CTR) == CTR
    assert container_cgroup("/oomwatch-lab/plain") == "/oomwatch-lab/plain"


def test_enricher_not_ready_defers_then_stores_with_pod_names(
    tmp_path: Path, clock: FakeClock
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


def test_enricher_that_never_answers_is_bounded(tmp_path: Path, clock: FakeClock) -> None:
    pipe, sink = make(
        tmp_path, clock, enrichers=[SlowPodLookup(ready_after=10**9)], enrich_wait_s=2.0
    )
    pipe.process([memcg_kill(7, 99.9)])
    clock.advance(2.5)
    pipe.process()
    assert len(sink.got) == 1 and sink.got[0].k8s is None


def test_a_kill_read_goes_before_deferred_incidents_that_are_complete(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A kill's record is the latency the agent promises: a deferred incident whose enricher
    would answer now waits for the next call when a kill comes in this one, or while a kill
    waits for its counter; one out of time is committed all the same."""
    lookup = SlowPodLookup(ready_after=2)
    pipe, sink = make(tmp_path, clock, enrichers=[lookup], enrich_wait_s=5.0)
    pipe.process([memcg_kill(7, 99.9)])  # deferred: the pod is not in the cache yet
    clock.advance(0.2)
    pipe.process([memcg_kill(8, 100.1)])  # the cache has the pod now
    assert [i.victim.pid for i in sink.got if i.victim] == [8]
    bare = Incident(kind="memcg", kernel_time_s=100.3, header_suppressed=True, victims=[])
    pipe.process([bare])  # waits for its counter: kill 7 waits too
    clock.advance(0.2)
    pipe.process()
    assert len(sink.got) == 1
    # the pass asked for shows three kills in the container: 7, 8 and the bare one
    pipe.process([], CgroupNews([CounterKills(CTR, 3, clock.now)], counted_at_s=clock.now))
    assert [i.victim.pid if i.victim else None for i in sink.got] == [8, None]
    pipe.process()  # nothing urgent: kill 7 now
    assert [i.victim.pid if i.victim else None for i in sink.got] == [8, None, 7]
    assert sink.got[2].k8s is not None and sink.got[2].k8s.pod == "web-1"


def test_a_deferred_incident_out_of_time_is_not_held_for_a_kill(
    tmp_path: Path, clock: FakeClock
) -> None:
    pipe, sink = make(
        tmp_path, clock, enrichers=[SlowPodLookup(ready_after=10**9)], enrich_wait_s=1.0
    )
    pipe.process([memcg_kill(7, 99.9)])
    clock.advance(1.5)
    pipe.process([memcg_kill(8, 101.4)])
    assert [i.victim.pid for i in sink.got if i.victim] == [7]
    assert sink.got[0].k8s is None and pipe.holding  # kill 8 waits for the pod in its turn


def test_counted_kill_without_report_is_stored_as_kmsg_missing(
    tmp_path: Path, clock: FakeClock
) -> None:
    pipe, sink = make(tmp_path, clock)
    view = FakeCgroupView(survived_for=lambda rel, v: False)
    pipe.process([], [CounterKills(CTR, 1, clock.now)], view=view)
    clock.advance(3.0)
    pipe.process()
    [got] = sink.got
    assert got.kmsg_missing and got.pod_uid == UID and got.container_survived is False
    assert got.boot_id == "boot-1"


def test_counter_only_kill_gets_the_last_sample_before_its_counter_moved(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Frozen when the counter showed the kill (not 2.5 s later, memory freed), usage,
    limit and breakdown from the last sample before it, flagged as sampled."""
    frozen_at: list[float] = []
    before = TimelineSample(
        clock.wall_s - 0.5, 30 << 20, 32 << 20, anon_bytes=29 << 20, file_bytes=1 << 20
    )
    after = TimelineSample(clock.wall_s + 1.0, 1 << 20, 32 << 20, anon_bytes=0, file_bytes=1 << 20)

    def timeline_for(rel: str, at_s: float) -> Timeline:
        frozen_at.append(at_s)
        samples = [x for x in (before, after) if x.t_seconds <= at_s]
        return Timeline(samples=samples, usage_at_kill_bytes=samples[-1].usage_bytes)

    pipe, sink = make(tmp_path, clock)
    view = FakeCgroupView(freeze=timeline_for, oom_group_for=lambda rel: True)
    counted_wall = clock.wall_s
    pipe.process([], [CounterKills(CTR, 1, clock.now)], view=view)
    clock.advance(3.0)
    pipe.process()
    [got] = sink.got
    assert got.kmsg_missing and frozen_at == [counted_wall]
    assert got.wall_time is not None and iso_epoch_s(got.wall_time) == counted_wall
    assert got.memcg is not None and got.memcg.usage_bytes == 30 * MiB
    assert got.memcg.limit_bytes == 32 * MiB and got.memcg_sampled
    assert got.breakdown_bytes is not None and got.breakdown_bytes.anon == 29 << 20
    assert any("not numbers the kernel printed" in note for note in got.notes)
    assert got.oom_group_enabled is True


def test_header_suppressed_kill_gets_sampled_usage_at_its_kernel_time(
    tmp_path: Path, clock: FakeClock
) -> None:
    sample = TimelineSample(clock.wall_s - 1.5, 31 << 20, 32 << 20, anon_bytes=30 << 20)
    frozen_at: list[float] = []

    def timeline_for(rel: str, at_s: float) -> Timeline:
        frozen_at.append(at_s)
        return Timeline(samples=[sample])

    pipe, sink = make(tmp_path, clock)
    bare = Incident(
        kind="memcg",
        kernel_time_s=clock.now - 1.0,
        header_suppressed=True,
        victims=[Victim(pid=5, comm="w")],
    )
    # a counter pass that began after the line arrived shows its counter's rise
    news = CgroupNews([CounterKills(CTR, 1, clock.now)], counted_at_s=clock.now)
    pipe.process([bare], news, view=FakeCgroupView(freeze=timeline_for))
    [got] = sink.got
    assert got.task_memcg == CTR and got.pod_uid == UID and frozen_at == [clock.wall_s - 1.0]
    assert got.memcg_sampled and got.memcg == MemcgUsage(usage_bytes=31 * MiB, limit_bytes=32 * MiB)


def test_kernel_printed_usage_is_never_replaced_by_a_sample(
    tmp_path: Path, clock: FakeClock
) -> None:
    sample = TimelineSample(clock.wall_s - 0.5, 1 << 20, 2 << 20)
    pipe, sink = make(tmp_path, clock)
    kill = memcg_kill(7, 99.9)
    kill.memcg = MemcgUsage(usage_bytes=32 * MiB, limit_bytes=32 * MiB)
    pipe.process([kill], view=FakeCgroupView(freeze=lambda rel, at: Timeline(samples=[sample])))
    [got] = sink.got
    assert got.memcg == MemcgUsage(usage_bytes=32 * MiB, limit_bytes=32 * MiB)
    assert not got.memcg_sampled


def test_restore_resumes_what_a_checkpoint_waited_on(tmp_path: Path, clock: FakeClock) -> None:
    """A counter rise owed a report when the agent stopped is recorded after the restart;
    an unreadable checkpoint starts the reconciliation afresh instead of failing."""
    before, _ = make(tmp_path / "before", clock)
    before.process([], [CounterKills(CTR, 1, clock.now)])
    assert before.state.rises and not before.state.quiet
    saved = Checkpoint({}, json.loads(json.dumps(pending_reconcile(before.state))))
    after, sink = make(tmp_path / "after", clock)
    after.restore(saved)
    assert after.state.rises == before.state.rises
    clock.advance(3.0)
    after.process()
    [got] = sink.got
    assert got.kmsg_missing and got.pod_uid == UID
    broken, _ = make(tmp_path / "broken", clock)
    broken.restore(Checkpoint({}, {"rises": [[CTR, None]]}))
    assert broken.state == ReconcileState()


def test_drain_at_shutdown_stores_waiting_bare_kill(tmp_path: Path, clock: FakeClock) -> None:
    pipe, sink = make(tmp_path, clock)
    bare = Incident(
        kind="memcg", kernel_time_s=99.0, header_suppressed=True, victims=[Victim(pid=5, comm="w")]
    )
    pipe.process([bare])
    assert sink.got == [] and pipe.holding
    pipe.drain()
    assert len(sink.got) == 1 and not pipe.holding


def test_log_line_fields_and_escaping(tmp_path: Path, clock: FakeClock) -> None:
    out = io.StringIO()
    setup_logging("json", stream=out)
    pipe = Pipeline(
        store=IncidentStore(tmp_path),
        sinks=[LogSink()],
        boot_id="b",
        node="n",
        wall_clock=clock.wall,
        mono_clock=clock,
    )
    evil = memcg_kill(8, 99.0)
    evil.victims[0].comm = 'x\n{"event": "oom_kill"}\x1b[2J'
    pipe.process([evil])
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    [line] = [entry for entry in lines if entry["event"] == "oom_kill"]
    assert line["k8s.pod.uid"] == UID and line["container.id"] == CID
    assert line["process.pid"] == 8 and line["limit_scope"] == "container"
    comm = line["process.executable.name"]
    assert comm.startswith("x\\x0a") and "\x1b" not in comm
    [stored] = pipe.store.query()
    assert line["message"] == stored.verdict and "\n" not in line["message"]
    assert line["verdict_code"] == "limit-container"
    assert line["findings"] == [f.code for f in stored.findings]
    assert stored.recommendation is None and "recommendation" not in line  # no usage line
    for key in (
        "group_kill",
        "kmsg_missing",
        "memcg_sampled",
        "kernel_time_s",
        "wall_time",
        "detected_at",
        "k8s.node.name",
    ):
        assert key in line
    # Unknown facts are left out, never null: no pod names (no Kubernetes), no survival
    # check, no usage or breakdown (the report had no `memory:` line or stats).
    assert None not in json_values(line)
    for absent in (
        "k8s.pod.name",
        "k8s.namespace.name",
        "container_survived",
        "notes",
        "usage_bytes",
        "limit_bytes",
        "breakdown",
    ):
        assert absent not in line


def json_values(value: object) -> list[object]:
    """Every scalar in a JSON document, however nested."""
    if isinstance(value, dict):
        return [v for item in value.values() for v in json_values(item)]
    if isinstance(value, list):
        return [v for item in value for v in json_values(item)]
    return [value]


def test_waiting_says_when_deadlines_need_the_loop(tmp_path: Path, clock: FakeClock) -> None:
    """The agent's loop sleeps until its next tick unless the pipeline waits on a deadline."""
    pipe, sink = make(tmp_path, clock, enrichers=[SlowPodLookup(ready_after=2)])
    assert not pipe.waiting
    pipe.process([memcg_kill(7, 99.9)])  # deferred for the pod, and expecting its counter
    assert pipe.waiting
    clock.advance(0.5)
    # the counter matches the report (in the pass the agent asks for after each kill line)
    pipe.process([], CgroupNews([CounterKills(CTR, 1, clock.now)], counted_at_s=clock.now))
    assert len(sink.got) == 1 and pipe.waiting  # ... and settles once no later line needs it
    clock.advance(SETTLE_S)
    pipe.process()
    assert not pipe.waiting
    pipe.process([], [CounterKills(CTR, 1, clock.now)])  # a kill owed a report: grace runs
    assert pipe.waiting
    clock.advance(3.0)
    pipe.process()
    assert len(sink.got) == 2 and sink.got[1].kmsg_missing and not pipe.waiting


def test_a_calm_containers_kill_waits_for_the_view_that_holds_its_window(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The worker's view holds the windows of containers in trouble only: a kill in a calm
    one asks the worker for its window and waits (without a sampler) for the view that holds
    it; a kill in a container that is not watched neither asks nor waits."""
    samples = (
        TimelineSample(clock.wall_s - 3.0, 20 * MiB, 32 * MiB),
        TimelineSample(clock.wall_s - 1.5, 31 * MiB, 32 * MiB),
        TimelineSample(clock.wall_s + 0.5, 1 * MiB, 32 * MiB),  # after the kill: freed
    )
    asked: list[str] = []
    calm = CgroupView(watched=frozenset({CTR}), ask_timeline=asked.append)
    pipe, sink = make(tmp_path, clock)
    pipe.process([memcg_kill(7, 99.0)], view=calm)
    assert sink.got == [] and asked == [CTR]  # its window is due, and asked for
    clock.advance(0.1)
    snapshot = TimelineSnapshot({CTR: FrozenRing.of(samples)}, window_s=600.0, interval_s=1.0)
    pipe.process([], view=replace(calm, timelines=snapshot))
    [got] = sink.got
    assert got.timeline == snapshot.freeze(CTR, clock.wall_s - 1.1)
    assert got.timeline is not None and got.timeline.samples == list(samples[:2])
    elsewhere = memcg_kill(8, 100.0, f"/kubepods/burstable/pod{UID}/{'b' * 64}")
    pipe.process([elsewhere], view=calm)
    assert len(sink.got) == 2 and sink.got[1].timeline is None and asked == [CTR]
