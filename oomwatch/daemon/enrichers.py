"""The enrichers the agent runs on each kill, in order: the one list a new one joins.

Each entry of `ENRICHERS` makes one enricher from the agent's `EnricherParts` (None: not on
this node).  They run on the loop's thread, in this order, before the diagnosis: the pod
first (its name and owner), then the forecast that warned of the kill, then the allocator's
state from the probe (which may defer the kill until the trainer's last samples are read).
An enricher with a `close()` is closed at shutdown.  What an enricher needs from another
thread comes as a value (ARCHITECTURE.md, "who produces which value").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from oomwatch.daemon.config import DaemonConfig
from oomwatch.daemon.forecast_stage import ForecastBook, ForecastJoin
from oomwatch.stages import ClosingEnricher, Enricher, EventLogger, KubeLink

__all__ = ["ENRICHERS", "EnricherParts", "MakeEnricher", "make_enrichers"]


@dataclass(frozen=True, slots=True)
class EnricherParts:
    """What the agent has made that an enricher may be made from."""

    config: DaemonConfig
    kube: KubeLink | None  # None: standalone
    forecasts: ForecastBook  # the forecast's warnings, as the pipeline recorded them
    probe_join: ClosingEnricher | None  # the probe's allocator join (None: no probe directory)
    log: EventLogger


MakeEnricher = Callable[[EnricherParts], Enricher | None]


def pod(parts: EnricherParts) -> Enricher | None:
    """The pod and container from the API's pod cache."""
    return parts.kube.enricher if parts.kube is not None else None


def forecast(parts: EnricherParts) -> Enricher:
    """Whether the kill was forecast, and how early."""
    return ForecastJoin(parts.forecasts)


def allocator(parts: EnricherParts) -> Enricher | None:
    """The trainer's allocator state from its probe file."""
    return parts.probe_join


ENRICHERS: tuple[MakeEnricher, ...] = (pod, forecast, allocator)


def make_enrichers(
    parts: EnricherParts, makers: tuple[MakeEnricher, ...] = ENRICHERS
) -> list[Enricher]:
    """The enrichers this node runs, in `makers`' order."""
    made = (make(parts) for make in makers)
    return [enricher for enricher in made if enricher is not None]
