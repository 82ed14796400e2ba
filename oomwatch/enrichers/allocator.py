"""The trainer's allocator state from its probe file (`probe/join.py`): it may match a file
by the pod UID and the container name the pod enricher found, and may defer the kill until the
trainer's last samples are read."""

from __future__ import annotations

from oomwatch.enrichers import EnricherParts, EnricherSpec
from oomwatch.stages import Enricher


def make(parts: EnricherParts) -> Enricher | None:
    """The probe's join; none without a probe directory."""
    return parts.probe_join


ENRICHER = EnricherSpec(place=300, make=make, after=("pod",))
