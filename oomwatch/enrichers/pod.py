"""The pod and container of a kill, from the API's pod cache (`kube/enrich.py`): first, as
the others join by what it names."""

from __future__ import annotations

from oomwatch.enrichers import EnricherParts, EnricherSpec
from oomwatch.stages import Enricher


def make(parts: EnricherParts) -> Enricher | None:
    """The Kubernetes link's enricher; none when standalone."""
    return parts.kube.enricher if parts.kube is not None else None


ENRICHER = EnricherSpec(place=100, make=make)
