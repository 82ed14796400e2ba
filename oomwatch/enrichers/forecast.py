"""Whether a kill was forecast, and how early (`daemon/forecast_stage.py`'s `ForecastJoin`,
from the warnings the pipeline recorded)."""

from __future__ import annotations

from oomwatch.daemon.forecast_stage import ForecastJoin
from oomwatch.enrichers import EnricherParts, EnricherSpec
from oomwatch.stages import Enricher


def make(parts: EnricherParts) -> Enricher:
    """Every node forecasts."""
    return ForecastJoin(parts.forecasts)


ENRICHER = EnricherSpec(place=200, make=make)
