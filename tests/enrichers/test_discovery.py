"""The agent's enrichers are the modules of `oomwatch.enrichers`, found by listing the package
and run in their declared places: a new enricher is one module there (and its test), with no
other file edited; a module that cannot be placed stops the agent's start, named."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from support.host import config_for
from support.sinks import CollectingSink

import oomwatch.enrichers
from oomwatch.daemon.agent import Agent
from oomwatch.daemon.forecast_stage import ForecastBook, ForecastJoin
from oomwatch.daemon.pipeline import Pipeline
from oomwatch.enrichers import (
    EnricherOrderError,
    EnricherParts,
    EnricherSpec,
    RegisteredEnricher,
    discover,
    make_enrichers,
    order,
)
from oomwatch.incident import Incident
from oomwatch.sinks.log import get_logger
from oomwatch.sinks.metrics import Metrics
from oomwatch.stages import ClosingEnricher, KubeLink
from oomwatch.store import IncidentStore

SHIPPED = ["pod", "forecast", "allocator"]


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


@pytest.fixture
def package_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder the enrichers package also lists, as if its modules had been added to it."""
    extra = tmp_path / "more_enrichers"
    extra.mkdir()
    monkeypatch.setattr(oomwatch.enrichers, "__path__", [*oomwatch.enrichers.__path__, str(extra)])
    before = set(sys.modules)
    yield extra
    for name in set(sys.modules) - before:
        if name.startswith("oomwatch.enrichers."):
            del sys.modules[name]


def _module(folder: Path, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(body))


def test_the_package_runs_pod_then_forecast_then_allocator() -> None:
    """Pinned: the pod first (the others join by what it names), then the forecast, then the
    allocator (a module added between them changes nothing here)."""
    found = {r.name: r.spec for r in discover()}
    assert [n for n in found if n in SHIPPED] == SHIPPED
    assert found["allocator"].after == ("pod",)  # it may match a probe file by the pod's names


def test_a_node_runs_the_enrichers_it_has_in_their_order(tmp_path: Path) -> None:
    pod, allocator = _Kube.enricher, _Marks("allocator")
    alone = make_enrichers(_parts(tmp_path, None, None))
    assert ForecastJoin in [type(e) for e in alone] and pod not in alone  # no cluster, no probe
    full = make_enrichers(_parts(tmp_path, _Kube(), allocator))
    known = [e for e in full if e is pod or e is allocator or isinstance(e, ForecastJoin)]
    assert [type(e) for e in known] == [_Marks, ForecastJoin, _Marks]
    assert known[0] is pod and known[2] is allocator


def test_a_module_added_to_the_package_runs_in_its_place(tmp_path: Path, package_dir: Path) -> None:
    _module(
        package_dir,
        "newcomer",
        """
        from oomwatch.enrichers import EnricherSpec


        class Newcomer:
            def enrich(self, incident):
                incident.runtime = (incident.runtime or "") + "newcomer,"
                return True


        ENRICHER = EnricherSpec(place=150, make=lambda parts: Newcomer(), after=("pod",))
        """,
    )
    assert [r.name for r in discover()][:3] == ["pod", "newcomer", "forecast"]
    sink = CollectingSink()
    enrichers = make_enrichers(_parts(tmp_path, _Kube(), _Marks("allocator")))
    pipeline = Pipeline(IncidentStore(tmp_path / "store"), [sink], enrichers)
    pipeline.process([Incident(kind="eviction", pod_uid="u1", detected_at="2026-11-27T10:00:00Z")])
    pipeline.drain()
    assert [i.runtime for i in sink.got] == ["pod,newcomer,allocator"]


def _spec(place: int, *after: str) -> EnricherSpec:
    return EnricherSpec(place, lambda _: None, after)


@pytest.mark.parametrize(
    ("found", "message"),
    [
        ([("a", _spec(10)), ("b", _spec(10))], "enrichers 'a' and 'b' both take place 10"),
        ([("a", _spec(10)), ("a", _spec(20))], "two enrichers are named 'a'"),
        ([("a", _spec(10, "nosuch"))], "'a' runs after 'nosuch', which is not an enricher"),
        (
            [("a", _spec(10, "b")), ("b", _spec(20))],
            "'a' (place 10) runs after 'b', whose place 20",
        ),
    ],
)
def test_an_order_that_cannot_hold_is_refused_naming_it(
    found: list[tuple[str, EnricherSpec]], message: str
) -> None:
    with pytest.raises(EnricherOrderError) as refused:
        order(RegisteredEnricher(name, spec) for name, spec in found)
    assert message in str(refused.value)


def test_the_agent_refuses_to_start_with_a_module_it_cannot_place(
    tmp_path: Path, package_dir: Path
) -> None:
    _module(package_dir, "undeclared", "def make(parts):\n    return None\n")
    _module(package_dir, "_helper", "VALUE = 1\n")  # a private helper is not an enricher
    with pytest.raises(EnricherOrderError, match=r"oomwatch\.enrichers\.undeclared declares no"):
        Agent(config_for(tmp_path))
    assert not (tmp_path / "state").exists()  # refused before the store was opened
    (package_dir / "undeclared.py").unlink()
    del sys.modules["oomwatch.enrichers.undeclared"]
    _module(
        package_dir,
        "early",
        "from oomwatch.enrichers import EnricherSpec\n"
        "ENRICHER = EnricherSpec(place=100, make=lambda parts: None)\n",
    )
    with pytest.raises(EnricherOrderError, match="'early' and 'pod' both take place 100"):
        Agent(config_for(tmp_path))
