"""The agent's forecast over synthetic containers, as the worker judges and the loop records:
a leak warns once (store, log, gauge, Event request), a kill joins the warning with its lead
time, calm containers cost no forecast, and what is no leak never warns."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from support.prometheus import parsed_samples

from oomwatch.cgroup_identity import container_cgroup, identify
from oomwatch.cgroups.discovery import WatchedCgroup
from oomwatch.daemon.cgroup_view import CgroupView
from oomwatch.daemon.forecast_news import ForecastChange, ForecastNews, ReasonSaid
from oomwatch.daemon.forecast_stage import ForecastBook, ForecastJoin
from oomwatch.daemon.forecasting import NOT_GROWING, ForecastWatch
from oomwatch.daemon.pipeline import Pipeline
from oomwatch.incident import Incident, Timeline, TimelineSample, Victim, iso_time
from oomwatch.sinks.metrics import Metrics, SeriesLabels
from oomwatch.store import IncidentStore

from .traces import flat, linear, sawtooth, timeline

CID = "ab" * 32


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    info = error = exception = warning


class _Node:
    """Containers fed one sample a second to a ForecastWatch, as the cgroup worker does; its
    changes recorded by a ForecastBook, as the loop does."""

    def __init__(self, tmp_path: Path, *, record: bool = True) -> None:
        self.record = record  # False: the changes are only kept, for the test to hand on
        self.changes: list[ForecastChange] = []
        self.store = IncidentStore(tmp_path)
        self.metrics = Metrics()
        self.log = _Log()
        self.events: list[tuple[str, str | None, str]] = []
        self.history: dict[str, list[TimelineSample]] = {}
        self.forecasts = 0
        self.watch = ForecastWatch(timeline_for=self._freeze, logger=self.log)
        self.book = ForecastBook(
            store=self.store,
            metrics=self.metrics,
            logger=self.log,
            labels_for=lambda uid, cid: SeriesLabels("shop", "web", "app", uid or ""),
            warn_pod=lambda uid, cid, note, details: self.events.append((uid, cid, note)),
        )
        self.takes = 0

    def _freeze(self, relpath: str, at_s: float) -> Timeline:
        self.forecasts += 1
        return Timeline(samples=self.history[relpath][-600:])

    def container(self) -> WatchedCgroup:
        relpath = f"/kubepods/burstable/pod{uuid.uuid4()}/{CID}"
        return WatchedCgroup(relpath, "/nonexistent" + relpath, 1, identify(relpath))

    def run(self, shapes: dict[WatchedCgroup, list[TimelineSample]]) -> None:
        for i in range(max(len(s) for s in shapes.values())):
            batch = []
            for cg, samples in shapes.items():
                if i < len(samples):
                    self.history.setdefault(cg.relpath, []).append(samples[i])
                    batch.append((cg, samples[i]))
            if batch:
                self.takes += 1
                changes = self.watch.observe(batch, batch[0][1].t_seconds)
                self.changes += changes
                if self.record:
                    self.book.take(ForecastNews(self.takes, tuple(changes)))

    def gauge(self) -> list[float]:
        scraped = parsed_samples(self.metrics.exposition())
        return [value for _, value in scraped.get("oomwatch_container_seconds_to_oom", [])]


@pytest.fixture
def node(tmp_path: Path) -> _Node:
    return _Node(tmp_path)


def _kill(cg: WatchedCgroup, at_s: float) -> Incident:
    return Incident(
        kind="memcg",
        task_memcg=cg.relpath,
        wall_time=iso_time(at_s),
        victims=[Victim(pid=1, comm="leaky")],
    )


def test_a_leak_warns_once_and_its_kill_is_joined_with_the_lead_time(node: _Node) -> None:
    leak = node.container()
    samples = timeline(linear(60, 0.5), 1000)
    node.run({leak: samples[:-1]})
    [(event, fields)] = node.log.lines
    assert event == "memory_limit_approaching"
    assert fields["namespace"] == "shop" and fields["pod_uid"] == leak.identity.pod_uid
    assert 250 <= fields["seconds_to_oom"] <= 320
    [(uid, cid, note)] = node.events
    assert (uid, cid) == (leak.identity.pod_uid, CID)
    assert note.startswith("container app of pod shop/web will reach its 256 MiB memory limit")
    [gauge] = node.gauge()
    assert 0 < gauge < 20, "the gauge counts down to the kill"
    [warning] = node.store.warnings()
    assert warning.outcome is None and warning.cgroup == leak.relpath

    killed_at_s = samples[-1].t_seconds
    incident = _kill(leak, killed_at_s)
    assert ForecastJoin(node.book).enrich(incident)
    record = incident.forecast
    assert record is not None and record.predicted
    assert record.lead_time_seconds == pytest.approx(killed_at_s - warning.started_at_s, abs=0.2)
    assert record.lead_time_seconds is not None and record.lead_time_seconds >= 250
    assert record.confidence_level in ("medium", "high")
    assert record.growing is not None and record.growing.startswith("anon ")
    assert node.store.warnings()[0].outcome == "killed"


def test_gone_container_clears_its_warning_and_gauge(node: _Node) -> None:
    leak, other = node.container(), node.container()
    samples = timeline(linear(60, 0.5), 1000)
    node.run({leak: samples[:200], other: timeline(flat(50), 260)})
    [warning] = node.store.warnings()
    assert warning.outcome == "cleared" and warning.ended_at_s == samples[0].t_seconds + 200
    assert not node.gauge()


def test_calm_containers_are_not_forecast(node: _Node) -> None:
    calm = {node.container(): timeline(flat(50 + i), 400, seed=i) for i in range(20)}
    node.run(calm)
    assert node.forecasts == 0 and not node.log.lines and not node.store.warnings()


def test_sawtooth_never_warns_and_its_kill_says_why(node: _Node) -> None:
    saw = node.container()
    node.run({saw: timeline(sawtooth(100, 230, 40), 1200)})
    assert not node.events and not node.store.warnings()
    incident = _kill(saw, timeline(flat(1), 1)[0].t_seconds + 1200)
    ForecastJoin(node.book).enrich(incident)
    assert incident.forecast is not None and not incident.forecast.predicted
    reason = incident.forecast.reason or ""
    assert reason == NOT_GROWING or "peak it came back from" in reason


def test_a_leak_under_a_sawtooth_warns(node: _Node) -> None:
    cg = node.container()
    leak, saw = linear(0, 0.12), sawtooth(60, 100, 30)
    samples = timeline(lambda t: leak(t) + saw(t), 3000)
    node.run({cg: samples})
    [warning] = node.store.warnings()
    assert samples[-1].t_seconds - warning.started_at_s >= 20


def test_the_report_says_whether_and_how_early_a_kill_was_warned(node: _Node) -> None:
    from oomwatch.diagnosis import diagnose
    from oomwatch.report.text import render_incident

    leak = node.container()
    samples = timeline(linear(60, 0.5), 1000)
    node.run({leak: samples[:-1]})
    incident = _kill(leak, samples[-1].t_seconds)
    ForecastJoin(node.book).enrich(incident)
    text = render_incident(diagnose(incident), 1, 1)
    [line] = [line for line in text.splitlines() if "forecast" in line]
    assert "warned 4m" in line and "before the kill (MemoryLimitApproaching at" in line
    assert "growing: anon " in line

    unwarned = _kill(node.container(), samples[-1].t_seconds)
    node.book.record([ReasonSaid(container_cgroup(unwarned.task_memcg or ""), "not growing")])
    ForecastJoin(node.book).enrich(unwarned)
    assert "no warning before the kill (not growing)" in render_incident(diagnose(unwarned), 1, 1)


def test_a_parent_with_a_limit_is_not_warned_when_its_child_leaks_first(node: _Node) -> None:
    """Nested limits outside Kubernetes (a scratch tree, a systemd slice): the child's kill
    comes first and the parent's usage falls with it, so only the child is warned of."""
    parent = WatchedCgroup("/lab", "/nonexistent/lab", 1, identify("/lab"))
    child = WatchedCgroup("/lab/leak", "/nonexistent/lab/leak", 1, identify("/lab/leak"))
    inner = timeline(linear(20, 0.3), 1000, limit=96 * (1 << 20))
    outer = timeline(linear(50, 0.3), len(inner), limit=128 * (1 << 20))  # the child + 30 MiB
    alone = _Node(node.store.path.parent / "alone")
    alone.run({parent: outer})
    assert len(alone.store.warnings()) == 1, "on its own, the parent's growth is warned of"
    node.run({parent: outer, child: inner})
    assert [w.cgroup for w in node.store.warnings()] == ["/lab/leak"]


def test_the_pipeline_records_a_views_forecast_once_and_joins_a_kill_taken_with_it(
    tmp_path: Path,
) -> None:
    """The worker's changes reach the store only through the pipeline, on the loop: a view
    passed twice is recorded once, and a kill in the same call is joined to its warning."""
    worker = _Node(tmp_path / "worker", record=False)
    leak = worker.container()
    samples = timeline(linear(60, 0.5), 1000)
    worker.run({leak: samples[:-1]})
    assert not worker.store.warnings() and not worker.log.lines  # the worker records nothing
    agent = _Node(tmp_path / "agent")
    killed_at_s = samples[-1].t_seconds
    join = ForecastJoin(agent.book)
    pipe = Pipeline(agent.store, [], [join], forecasts=agent.book, wall_clock=lambda: killed_at_s)
    view = CgroupView(forecast=ForecastNews(1, tuple(worker.changes)))
    pipe.process([_kill(leak, killed_at_s)], (), None, view)
    pipe.process((), (), None, view)
    pipe.drain()
    [warning] = agent.store.warnings()
    assert warning.outcome == "killed" and warning.ended_at_s == killed_at_s
    assert [event for event, _ in agent.log.lines] == ["memory_limit_approaching"]
    assert len(agent.events) == 1
    [stored] = agent.store.query()
    assert stored.forecast is not None and stored.forecast.predicted
    assert stored.forecast.lead_time_seconds == round(killed_at_s - warning.started_at_s, 1)


def test_a_restarted_agent_joins_a_kill_to_the_warning_an_earlier_run_left_open(
    node: _Node,
) -> None:
    leak = node.container()
    samples = timeline(linear(60, 0.5), 1000)
    node.run({leak: samples[:-1]})
    [warning] = node.store.warnings()
    killed_at_s = samples[-1].t_seconds
    restarted = ForecastBook(
        store=node.store,
        metrics=Metrics(),
        logger=_Log(),
        labels_for=lambda uid, cid: None,
        wall_clock=lambda: killed_at_s,
    )
    incident = _kill(leak, killed_at_s)
    ForecastJoin(restarted).enrich(incident)
    assert incident.forecast is not None and incident.forecast.predicted
    assert incident.forecast.warned_at == iso_time(warning.started_at_s)
    assert node.store.warnings()[0].outcome == "killed"
