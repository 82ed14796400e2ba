"""The agent's enrichers are `daemon.enrichers.ENRICHERS`, in its order, and only those this
node has: the one list a new enricher joins."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from support.host import config_for
from support.sinks import CollectingSink

from oomwatch.daemon.enrichers import ENRICHERS, EnricherParts, make_enrichers
from oomwatch.daemon.forecast_stage import ForecastBook, ForecastJoin
from oomwatch.daemon.pipeline import Pipeline
from oomwatch.incident import Incident
from oomwatch.sinks.log import get_logger
from oomwatch.sinks.metrics import Metrics
from oomwatch.stages import ClosingEnricher, Enricher, KubeLink
from oomwatch.store import IncidentStore


class _Marks:
    """An enricher that notes its name on each kill."""

    def __init__(self, name: str) -> None:
        self.name = name

    def enrich(self, incident: Incident) -> bool:
        incident.runtime = f"{incident.runtime or ''}{self.name}"
        return True

    def close(self) -> None:
        pass


class _Kube:
    enricher = _Marks("pod,")


def _parts(tmp_path: Path, kube: object | None, probe: ClosingEnricher | None) -> EnricherParts:
    store = IncidentStore(tmp_path / "state")
    book = ForecastBook(
        store=store, metrics=Metrics(), logger=get_logger(), labels_for=lambda *_: None
    )
    return EnricherParts(config_for(tmp_path), cast(KubeLink, kube), book, probe, get_logger())


def test_a_node_runs_the_listed_enrichers_it_has_in_the_lists_order(tmp_path: Path) -> None:
    """Pinned here: the pod, then the forecast, then the allocator, and only those present
    (a new entry of the list changes nothing here)."""
    pod, allocator = _Kube.enricher, _Marks("allocator")
    alone = make_enrichers(_parts(tmp_path, None, None))
    assert ForecastJoin in [type(e) for e in alone] and pod not in alone  # no cluster, no probe
    full = make_enrichers(_parts(tmp_path, _Kube(), allocator))
    known = [e for e in full if e is pod or e is allocator or isinstance(e, ForecastJoin)]
    assert [type(e) for e in known] == [_Marks, ForecastJoin, _Marks]
    assert known[0] is pod and known[2] is allocator


def test_a_new_enricher_is_one_entry_and_runs_in_the_pipeline(tmp_path: Path) -> None:
    def newcomer(parts: EnricherParts) -> Enricher:
        return _Marks("newcomer")

    parts = _parts(tmp_path, _Kube(), None)
    enrichers = make_enrichers(parts, (*ENRICHERS, newcomer))
    sink = CollectingSink()
    pipeline = Pipeline(IncidentStore(tmp_path / "store"), [sink], enrichers)
    pipeline.process([Incident(kind="eviction", pod_uid="u1", detected_at="2026-11-27T10:00:00Z")])
    pipeline.drain()
    assert [i.runtime for i in sink.got] == ["pod,newcomer"]
