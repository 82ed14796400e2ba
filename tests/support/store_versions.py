"""The store as another release left it, for the upgrade and rollback tests: the file 0.1.0
wrote (`FIXTURE`), this code as the next release would ship it (`newer_agent`, one more
migration), a store opened on either, and a store of uncapped group kills as agents before
the victim cap wrote them (`uncapped_group_kill_store`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from oomwatch.incident import Incident, TaskRow, Victim
from oomwatch.store import IncidentStore, opening

FIXTURE = Path(__file__).resolve().parents[1] / "store" / "data" / "store-0.1.0.db"


# The next schema: a column the older agent's INSERTs leave at its default, and a table.
FUTURE = """
    ALTER TABLE incidents ADD COLUMN workload TEXT;
    CREATE TABLE owners (pod_uid TEXT PRIMARY KEY, workload TEXT NOT NULL);
"""


OLDER = opening.SCHEMA_VERSION


NEWER_SCHEMA = OLDER + 1


@contextmanager
def newer_agent(*, breaking: bool) -> Iterator[None]:
    """This code as the next release: one more migration, breaking or additive."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(opening, "MIGRATIONS", (*opening.MIGRATIONS, FUTURE))
        patch.setattr(opening, "SCHEMA_VERSION", NEWER_SCHEMA)
        if breaking:
            patch.setattr(
                opening, "BREAKING_MIGRATIONS", (*opening.BREAKING_MIGRATIONS, NEWER_SCHEMA)
            )
        yield


def open_store(state: Path) -> IncidentStore:
    return IncidentStore(state, max_age_s=1e12)  # the fixture's kills are dated when written


def uncapped_group_kill_store(path: Path, incidents: int = 8) -> None:
    """A store as agents before the victim cap left it: `incidents` group kills of 20,000
    victims and 300 task rows each, every one stored whole (4.1 MB of JSON)."""
    store = IncidentStore(path)
    for k in range(incidents):
        victims = [
            Victim(pid=100 + i, comm=f"w{i}", anon_rss_bytes=i << 12, uid=1000)
            for i in range(20_000)
        ]
        tasks = [TaskRow(pid=100 + i, name=f"w{i}", uid=1000, rss_pages=i) for i in range(300)]
        incident = Incident(
            kind="memcg",
            boot_id="b",
            kernel_time_s=float(k),
            group_kill=True,
            kills_counted=20_001,
            victims=victims,
            tasks=tasks,
            wall_time=f"2026-11-26T10:00:{k:02d}+00:00",
        )
        assert store.add(incident)
        raw = json.dumps(incident.to_dict())  # uncapped, as the older agent wrote it
        store._db.execute(
            "UPDATE incidents SET data = ? WHERE id = (SELECT MAX(id) FROM incidents)", (raw,)
        )
    store.close()
