"""The store as another release left it, for the upgrade and rollback tests: the file 0.1.0
wrote (`FIXTURE`), this code as the next release would ship it (`newer_agent`, one more
migration), and a store opened on either."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from oomwatch.store import IncidentStore
from oomwatch.store import database as store

FIXTURE = Path(__file__).resolve().parents[1] / "store" / "data" / "store-0.1.0.db"


# The next schema: a column the older agent's INSERTs leave at its default, and a table.
FUTURE = """
    ALTER TABLE incidents ADD COLUMN workload TEXT;
    CREATE TABLE owners (pod_uid TEXT PRIMARY KEY, workload TEXT NOT NULL);
"""


OLDER = store.SCHEMA_VERSION


NEWER_SCHEMA = OLDER + 1


@contextmanager
def newer_agent(*, breaking: bool) -> Iterator[None]:
    """This code as the next release: one more migration, breaking or additive."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "MIGRATIONS", (*store.MIGRATIONS, FUTURE))
        patch.setattr(store, "SCHEMA_VERSION", NEWER_SCHEMA)
        if breaking:
            patch.setattr(store, "BREAKING_MIGRATIONS", (*store.BREAKING_MIGRATIONS, NEWER_SCHEMA))
        yield


def open_store(state: Path) -> IncidentStore:
    return IncidentStore(state, max_age_s=1e12)  # the fixture's kills are dated when written
