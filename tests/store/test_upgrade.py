"""Upgrades and rollbacks of the store, on real SQLite files: an agent meeting a
store of another schema keeps running and loses nothing recorded.

`data/store-0.1.0.db` was written by oomwatch 0.1.0 itself (main at b5acc43, `git archive`
into a directory on PYTHONPATH): `IncidentStore.add` of every incident decoded from corpus
logs 01 and 02 (3 kills), then one `save_checkpoint` (cursor 4242 of boot BOOT).  The newer
agent is this code with one more migration, as the next release would ship it; whether an
older agent may use its database is that migration's mark (`BREAKING_MIGRATIONS`).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from support.store_versions import FIXTURE, NEWER_SCHEMA, OLDER, newer_agent, open_store

from oomwatch.incident import Incident, PodContext, Victim
from oomwatch.sources.kmsg import KmsgCursor
from oomwatch.store import IncidentStore, StoreError, opening
from oomwatch.store.limits import KEEP_ASIDE, move_aside
from oomwatch.store.upgrade import NEWER, oldest_user, set_aside, usable

BOOT = "8f2c1d9e-0b1a-4c3d-9e8f-7a6b5c4d3e2f"
FIXTURE_KILLS = 3
FIXTURE_SCHEMA = 2  # 0.1.0's: incidents, cursor, checkpoint and counters


def kill(pid: int) -> Incident:
    return Incident(
        kind="memcg",
        boot_id=BOOT,
        kernel_time_s=float(pid),
        wall_time="2026-11-22T08:00:00+00:00",
        task_memcg="/kubepods/podu/c",
        victims=[Victim(pid=pid, comm="java")],
        pod_uid="u",
        container_id="c",
        k8s=PodContext(namespace="shop", pod="web-1", container="app"),
    )


def header(state: Path) -> tuple[int, int]:
    db = sqlite3.connect(state / "oomwatch.db")
    try:
        return int(db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]), int(
            db.execute("PRAGMA user_version").fetchone()[0]
        )
    finally:
        db.close()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    shutil.copy(FIXTURE, tmp_path / "oomwatch.db")
    return tmp_path


def test_a_0_1_0_store_opens_with_its_incidents_and_checkpoint(state: Path) -> None:
    assert header(state) == (FIXTURE_SCHEMA, 0)  # 0.1.0 wrote no header
    reader = IncidentStore.open_readonly(state)
    assert reader.count() == FIXTURE_KILLS
    agent = open_store(state)
    kills = agent.query()
    assert len(kills) == FIXTURE_KILLS and {k.kind for k in kills} == {"memcg", "unknown"}
    assert agent.load_cursor() == KmsgCursor(BOOT, 4242)
    assert agent.load_checkpoint(BOOT) is not None
    agent.close()
    assert header(state) == (OLDER, oldest_user(OLDER, opening.BREAKING_MIGRATIONS))
    with newer_agent(breaking=True):  # the upgrade migrates it, keeping everything
        upgraded = open_store(state)
        assert upgraded.query() == kills and upgraded.load_cursor() == KmsgCursor(BOOT, 4242)
        upgraded.close()
    assert header(state) == (NEWER_SCHEMA, NEWER_SCHEMA)


def test_an_older_agent_keeps_using_an_additive_newer_store(state: Path) -> None:
    with newer_agent(breaking=False):
        newer = open_store(state)
        assert newer.add(kill(101))
        newer.close()
    assert header(state) == (NEWER_SCHEMA, 1)  # agents from schema 1 on may use it
    older = open_store(state)  # the rollback
    assert older.count() == FIXTURE_KILLS + 1 and not set_aside(state / "oomwatch.db", NEWER)
    assert older.add(kill(102)) and not older.add(kill(101))
    assert IncidentStore.open_readonly(state).count() == FIXTURE_KILLS + 2  # oomwatch report
    older.close()
    assert header(state) == (NEWER_SCHEMA, 1)  # not migrated down, header kept
    with newer_agent(breaking=False):  # the upgrade again
        newer = open_store(state)
        assert {v.pid for k in newer.query() for v in k.victims} >= {101, 102}
        newer.close()
    db = sqlite3.connect(state / "oomwatch.db")
    assert db.execute("SELECT COUNT(*) FROM incidents WHERE workload IS NULL").fetchone()[0] == (
        FIXTURE_KILLS + 2
    )  # the older agent's row took the new column's default
    assert db.execute("SELECT COUNT(*) FROM owners").fetchone()[0] == 0
    db.close()


def test_a_rollback_over_a_breaking_store_loses_nothing(
    state: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with newer_agent(breaking=True):
        newer = open_store(state)
        assert newer.add(kill(101))
        newer.close()
    older = open_store(state)  # the rollback: it cannot use the store, and must not exit
    (aside,) = set_aside(state / "oomwatch.db", NEWER)
    assert older.count() == 0
    assert older.add(kill(102)) and older.add(kill(101))  # 101: the kernel ring, read again
    older.close()
    assert IncidentStore.open_readonly(state).count() == 2  # its `oomwatch report` reads on
    with pytest.raises(StoreError, match="newer"):
        (state / "copy").mkdir()
        shutil.copy(aside, state / "copy" / "oomwatch.db")  # the set-aside store, to an old
        IncidentStore.open_readonly(state / "copy").close()  # `oomwatch report --store`
    open_store(state).close()  # the older agent restarted: the copy is not its to take
    assert set_aside(state / "oomwatch.db", NEWER) == [aside]
    with newer_agent(breaking=True):  # the upgrade again
        newer = open_store(state)
        kills = newer.query()
        newer.close()
    assert sorted(k.victims[0].pid for k in kills if k.kind == "memcg" and k.boot_id == BOOT) == [
        101,
        102,
    ]  # each kill once
    assert len(kills) == FIXTURE_KILLS + 2
    assert not set_aside(state / "oomwatch.db", NEWER) and not list(state.glob("*.newer-*"))
    assert any(
        r.getMessage() == "store_taken_back" and getattr(r, "incidents", None) == 3
        for r in caplog.records
    )


def test_a_store_still_newer_than_its_reader_is_left_for_a_newer_agent(state: Path) -> None:
    with newer_agent(breaking=True):
        open_store(state).close()
    move_aside(state / "oomwatch.db", NEWER)  # as an older agent did
    open_store(state).close()  # this agent may not use it either: it stays aside
    assert len(set_aside(state / "oomwatch.db", NEWER)) == 1


def test_set_aside_newer_stores_are_not_pushed_out_by_corrupt_ones(tmp_path: Path) -> None:
    db_path = tmp_path / "oomwatch.db"
    db_path.write_bytes(b"newer")
    newer = move_aside(db_path, NEWER)
    for _ in range(KEEP_ASIDE + 2):
        db_path.write_bytes(b"corrupt")
        move_aside(db_path, "corrupt")
    assert newer.exists() and len(set_aside(db_path, "corrupt")) <= KEEP_ASIDE


@pytest.mark.parametrize(
    "version,oldest,mine,expected",
    [
        (2, 0, 2, True),
        (3, 0, 2, False),
        (3, 1, 2, True),
        (3, 3, 2, False),
        (1, 0, 2, True),
    ],
)
def test_usable(version: int, oldest: int, mine: int, expected: bool) -> None:
    assert usable(version, oldest, mine) is expected
