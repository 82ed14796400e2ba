"""Incidents found in the pod status must each survive the store's duplicate check.

They carry no kernel time and no victim, so `identity_key()` alone cannot tell two of them
apart; the store keys them by pod, container and time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.incident import Incident, IncidentKind
from oomwatch.store import IncidentStore


@pytest.mark.parametrize("kind", ["eviction", "false_oomkilled"])
def test_two_status_incidents_are_both_stored(tmp_path: Path, kind: IncidentKind) -> None:
    store = IncidentStore(tmp_path)
    first = Incident(
        kind=kind,
        boot_id="b",
        pod_uid="u1",
        container_id="c1",
        wall_time="2026-11-22T08:00:00+00:00",
    )
    second = Incident(
        kind=kind,
        boot_id="b",
        pod_uid="u2",
        container_id="c2",
        wall_time="2026-11-22T09:00:00+00:00",
    )
    assert store.add(first) is True
    assert store.add(second) is True
    assert store.add(second) is False  # the same one again is still a duplicate
