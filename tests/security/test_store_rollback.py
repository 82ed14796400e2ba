"""A rolled-back agent, as a process, on the store a newer agent left on the node:
it keeps running and records into that store when the newer schema says it may (the
breaking case, moved aside: test_agent_attacks.py; taken back: tests/daemon)."""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

from support import until
from support.fifo_agent import REPO, running_agent
from support.store_versions import FIXTURE, NEWER_SCHEMA, newer_agent, open_store


def count(db_path: Path) -> int:
    db = sqlite3.connect(db_path)
    try:
        return int(db.execute("SELECT COUNT(*) FROM incidents").fetchone()[0])
    finally:
        db.close()


def test_the_agent_records_into_an_additive_newer_store(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(FIXTURE, state / "oomwatch.db")
    with newer_agent(breaking=False):
        open_store(state).close()  # the newer agent migrated it
    db_path = state / "oomwatch.db"
    before = count(db_path)
    db = sqlite3.connect(db_path)  # the agent prunes by age: date the fixture's kills now
    db.execute("UPDATE incidents SET detected_at_s = ?", (time.time(),))
    db.commit()
    db.close()
    with running_agent(REPO, tmp_path) as agent:
        agent.kill()
        until("the kill stored", lambda: count(db_path) if count(db_path) != before else None, 20.0)
        assert agent.proc.poll() is None  # still running
    assert count(db_path) == before + 1
    assert not list(state.glob("oomwatch.db.*-*"))  # nothing moved aside
    db = sqlite3.connect(db_path)
    assert db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] == NEWER_SCHEMA
    db.close()
