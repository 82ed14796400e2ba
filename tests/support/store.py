"""Reading the agent's store as `oomwatch report --store` would, in tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from oomwatch.incident import Incident
from oomwatch.reconcile.state import GRACE_S
from oomwatch.store import IncidentStore, StoreError
from support import settled, wait_for
from support.contract import validate_stored

# A store unchanged this long has nothing more coming: a counted kill waits GRACE_S for its
# log line before it is stored alone (kmsg_missing), and the store is written after that.
STORE_QUIET_S = GRACE_S + 0.5


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
    found: list[Incident] = []

    def came() -> bool:
        try:
            found[:] = [i for i in stored(state_dir) if wanted(i)]
        except StoreError:
            found.clear()  # not created yet
        return bool(found)

    wait_for(came, timeout_s, interval_s=0.1)
    return found


def settled_incidents(
    read: Callable[[], list[Incident]], timeout_s: float = 60.0
) -> list[Incident]:
    """What `read` finds in the agent's store once it has stayed the same for
    `STORE_QUIET_S`: no duplicate and no late `kmsg_missing` incident is still to come."""
    return settled("the stored incidents", read, STORE_QUIET_S, timeout_s)
