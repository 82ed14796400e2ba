"""Reading the agent's store as `oomwatch report --store` would, in tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from oomwatch.incident import Incident
from oomwatch.store import IncidentStore, StoreError
from support.contract import validate_stored


def stored(state_dir: Path) -> list[Incident]:
    """Every incident the agent stored, each validated against the JSON contract
    (schemas/report.schema.json); StoreError while there is no store yet."""
    reader = IncidentStore.open_readonly(state_dir)
    try:
        incidents = reader.query()
    finally:
        reader.close()
    for incident in incidents:
        validate_stored(incident.to_dict())
    return incidents


def wait_stored(
    state_dir: Path, wanted: Callable[[Incident], bool], timeout_s: float = 30.0
) -> list[Incident]:
    """The stored incidents `wanted` accepts, once there is one; [] at the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if found := [i for i in stored(state_dir) if wanted(i)]:
                return found
        except StoreError:
            pass  # not created yet
        if time.monotonic() > deadline:
            return []
        time.sleep(0.1)
