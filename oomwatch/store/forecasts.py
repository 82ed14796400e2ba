"""Pre-OOM warnings in the store: the `forecasts` table, over a connection the
caller (`IncidentStore`, under its lock) holds."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_COLUMNS = "id, started_at_s, ended_at_s, outcome, data, cgroup"


@dataclass(frozen=True, slots=True)
class StoredWarning:
    """A pre-OOM warning as the store keeps it: when, how it ended, what it forecast."""

    id: int
    started_at_s: float
    ended_at_s: float | None
    outcome: str | None  # None while in force; "killed" or "cleared"
    data: dict[str, Any]
    cgroup: str


def _stored_warning(row: tuple[Any, ...]) -> StoredWarning:
    """From (id, started_at_s, ended_at_s, outcome, data, cgroup)."""
    try:
        data = json.loads(row[4])
    except ValueError:
        data = {}
    return StoredWarning(
        int(row[0]),
        float(row[1]),
        row[2],
        row[3],
        data if isinstance(data, dict) else {},
        str(row[5]),
    )


def add(
    db: sqlite3.Connection,
    cgroup: str,
    pod_uid: str | None,
    container_id: str | None,
    started_at_s: float,
    data: Mapping[str, Any],
) -> int:
    cur = db.execute(
        "INSERT INTO forecasts (cgroup, pod_uid, container_id, started_at_s, data)"
        " VALUES (?, ?, ?, ?, ?)",
        (cgroup, pod_uid, container_id, started_at_s, json.dumps(data, separators=(",", ":"))),
    )
    return int(cur.lastrowid or 0)


def end(db: sqlite3.Connection, warning_id: int, ended_at_s: float, outcome: str) -> None:
    db.execute(
        "UPDATE forecasts SET ended_at_s = ?, outcome = ? WHERE id = ? AND outcome IS NULL",
        (ended_at_s, outcome, warning_id),
    )


def before(
    db: sqlite3.Connection, cgroup: str, at_s: float, grace_s: float
) -> StoredWarning | None:
    row = db.execute(
        f"SELECT {_COLUMNS} FROM forecasts"
        " WHERE cgroup = ? AND started_at_s <= ? AND (ended_at_s IS NULL OR ended_at_s >= ?)"
        " ORDER BY started_at_s DESC LIMIT 1",
        (cgroup, at_s, at_s - grace_s),
    ).fetchone()
    return None if row is None else _stored_warning(row)


def since(db: sqlite3.Connection, since_s: float) -> list[StoredWarning]:
    rows = db.execute(
        f"SELECT {_COLUMNS} FROM forecasts WHERE started_at_s >= ? ORDER BY started_at_s, id",
        (since_s,),
    ).fetchall()
    return [_stored_warning(row) for row in rows]
