"""The daemon's checkpoint in the store: the kmsg cursor (a restarted daemon neither repeats
nor skips records) and, for the same boot, the cgroup OOM counters every recorded kill
explains plus what the reconciliation still waited on -- over a connection the caller
(`IncidentStore`, under its lock) holds."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oomwatch.cgroups.counters import OomCounters
from oomwatch.sources.kmsg import KmsgCursor


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What an earlier run of this boot had explained: per cgroup the OOM counters that
    every recorded kill accounts for, and the reconciliation it still waited on (JSON)."""

    counters: dict[str, OomCounters]
    reconcile: dict[str, Any]


def load_cursor(db: sqlite3.Connection) -> KmsgCursor | None:
    row = db.execute("SELECT boot_id, seq FROM kmsg_cursor WHERE id = 1").fetchone()
    return KmsgCursor(str(row[0]), int(row[1])) if row else None


def save_cursor(db: sqlite3.Connection, cursor: KmsgCursor) -> None:
    db.execute(
        "INSERT INTO kmsg_cursor (id, boot_id, seq, updated_at_s) VALUES (1, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET boot_id = excluded.boot_id, seq = excluded.seq,"
        " updated_at_s = excluded.updated_at_s",
        (cursor.boot_id, cursor.seq, time.time()),
    )


def save(
    db: sqlite3.Connection,
    boot_id: str,
    cursor: KmsgCursor | None,
    counters: Mapping[str, OomCounters] | None,
    reconcile: Mapping[str, Any] | None,
) -> None:
    """All three in one transaction; `None` keeps what was saved before."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if cursor is not None:
            save_cursor(db, cursor)
        if counters is not None:
            db.execute("DELETE FROM cgroup_counters")
            db.executemany(
                "INSERT INTO cgroup_counters VALUES (?, ?, ?, ?, ?)",
                [
                    (rel, boot_id, c.oom, c.oom_kill, c.oom_group_kill)
                    for rel, c in counters.items()
                ],
            )
        if reconcile is not None:
            db.execute(
                "INSERT INTO checkpoint (id, boot_id, reconcile, updated_at_s)"
                " VALUES (1, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
                " boot_id = excluded.boot_id, reconcile = excluded.reconcile,"
                " updated_at_s = excluded.updated_at_s",
                (boot_id, json.dumps(reconcile, separators=(",", ":")), time.time()),
            )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def load(db: sqlite3.Connection, boot_id: str) -> Checkpoint | None:
    """The checkpoint of this boot (counters reset at reboot), or None."""
    row = db.execute("SELECT boot_id, reconcile FROM checkpoint WHERE id = 1").fetchone()
    if row is None or row[0] != boot_id:
        return None
    try:
        reconcile = json.loads(row[1])
    except ValueError:
        reconcile = {}
    rows = db.execute(
        "SELECT relpath, oom, oom_kill, oom_group_kill FROM cgroup_counters WHERE boot_id = ?",
        (boot_id,),
    ).fetchall()
    counters = {str(r[0]): OomCounters(int(r[1]), int(r[2]), int(r[3])) for r in rows}
    return Checkpoint(counters, reconcile if isinstance(reconcile, dict) else {})
