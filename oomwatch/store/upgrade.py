"""Upgrades and rollbacks of the incident store: which agent may use a database of which
schema, and taking back what an older agent had to set aside.

The store lives on the node (hostPath), so a rollback puts an older agent on a database a
newer one wrote.  Each schema migration says whether an agent that knows only the schemas
before it can still use the database after it: an *additive* migration only adds tables,
indexes, or columns with a default, so the older agent's statements still work and what it
writes is valid for the newer one.  The oldest schema that may use a database is written in
its header (`PRAGMA user_version`; 0 = not written, as by 0.1.0), so an older agent decides
from the file alone:

- a newer database it may use, it uses as it is: nothing migrated down, nothing lost, and
  the newer agent, back again, finds everything in it;
- one it may not (a migration it cannot know of changed what it relies on), it moves aside
  (`oomwatch.db.newer-<time>`) and starts a fresh one beside it, so it never crash-loops; the
  newer agent, back again, takes the set-aside incidents back into its database
  (`take_back_set_aside`) and removes the copy.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

log = logging.getLogger("oomwatch.store")

NEWER = "newer"  # the reason in a set-aside database's name


def schema_of(db: sqlite3.Connection, schema: str = "main") -> tuple[int, int]:
    """(schema version, oldest schema that may use it) of a database; (0, 0) if it has no
    migrations table yet."""
    has_table = db.execute(
        f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    version = 0
    if has_table:
        row = db.execute(f"SELECT COALESCE(MAX(version), 0) FROM {schema}.schema_migrations")
        version = int(row.fetchone()[0])
    return version, int(db.execute(f"PRAGMA {schema}.user_version").fetchone()[0])


def oldest_user(version: int, breaking: tuple[int, ...]) -> int:
    """The oldest schema whose agents may use a database at `version`: the newest migration
    up to it that was not additive (`breaking` lists those)."""
    return max((v for v in breaking if v <= version), default=1)


def usable(version: int, oldest: int, mine: int) -> bool:
    """Whether an agent at schema `mine` may use a database at `version` whose header names
    `oldest` (0: unknown, so only if it is not newer)."""
    return version <= mine or 0 < oldest <= mine


def set_aside(db_path: Path, reason: str) -> list[Path]:
    """The databases moved aside for `reason` (move_aside's names), oldest name first."""
    return sorted(
        p
        for p in db_path.parent.glob(f"{db_path.name}.{reason}-*")
        if not p.name.endswith(("-wal", "-shm"))
    )


def take_back_set_aside(db: sqlite3.Connection, db_path: Path, mine: int) -> int:
    """Copy the incidents of every database an older agent set aside as newer, and that this
    agent may use, into `db` (the same kill is kept once); remove each copy taken back.
    Returns how many incidents were added.  A copy that cannot be read stays where it is."""
    added = 0
    for aside in set_aside(db_path, NEWER):
        try:
            taken = _take_back(db, aside, mine)
        except sqlite3.Error as exc:
            log.warning(
                "store_take_back_failed",
                extra={"aside": aside.name, "error": str(exc), "consequence": "left where it is"},
            )
            continue
        if taken is None:
            continue  # still newer than this agent: for a newer one to take back
        for suffix in ("", "-wal", "-shm"):
            Path(f"{aside}{suffix}").unlink(missing_ok=True)
        log.warning(
            "store_taken_back",
            extra={"incidents": taken, "aside": aside.name, "set_aside_by": "an older oomwatch"},
        )
        added += taken
    return added


def _take_back(db: sqlite3.Connection, aside: Path, mine: int) -> int | None:
    db.execute("ATTACH DATABASE ? AS aside", (str(aside),))
    try:
        version, oldest = schema_of(db, "aside")
        if not usable(version, oldest, mine):
            return None
        columns = [c for c in _columns(db, "main") if c != "id" and c in _columns(db, "aside")]
        names = ", ".join(columns)
        db.execute("BEGIN IMMEDIATE")
        try:
            added = db.execute(
                f"INSERT OR IGNORE INTO main.incidents ({names})"
                f" SELECT {names} FROM aside.incidents ORDER BY id"
            ).rowcount
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return int(added)
    finally:
        db.execute("DETACH DATABASE aside")


def _columns(db: sqlite3.Connection, schema: str) -> list[str]:
    return [str(row[1]) for row in db.execute(f"PRAGMA {schema}.table_info(incidents)")]
