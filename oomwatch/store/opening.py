"""Opening the store's file: owner-only, WAL, size-capped, checked and migrated; a file that
cannot be used (corrupt, or of a newer schema this agent may not use) is moved aside for a
fresh one, and at worst the store lives in memory -- an agent that exits on its store
crash-loops on the node.  Which schema an agent may use is oomwatch.store.upgrade's.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path

from oomwatch.store.limits import move_aside
from oomwatch.store.schema import BREAKING_MIGRATIONS, MIGRATIONS, SCHEMA_VERSION
from oomwatch.store.upgrade import NEWER, oldest_user, schema_of, take_back_set_aside, usable

__all__ = [  # the schema's names too: what this module reads is what a test patches
    "BREAKING_MIGRATIONS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "StoreError",
    "Unusable",
    "check_version",
    "open_writable",
    "take_back",
    "unusable_reason",
]

log = logging.getLogger("oomwatch.store")

_CORRUPT_CODES = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB


class StoreError(Exception):
    """The state dir or its database cannot be used (names the path)."""


class Unusable(StoreError):
    """A database the agent moves aside: `reason` is corrupt or newer (its schema)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def unusable_reason(exc: BaseException) -> str | None:
    """`corrupt`/`newer` for a database to move aside; None for other failures (a read-only
    or full disk, permissions), where moving the file would not help."""
    if isinstance(exc, Unusable):
        return exc.reason
    code = getattr(exc, "sqlite_errorcode", None)
    return "corrupt" if isinstance(code, int) and code & 0xFF in _CORRUPT_CODES else None


def _connect(target: Path | str, max_db_bytes: int) -> sqlite3.Connection:
    """A writable connection, size-capped, checked, migrated (closed again on failure)."""
    if isinstance(target, Path):
        _private_file(target)
    db = sqlite3.connect(target, timeout=5.0, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA journal_size_limit={16 << 20}")
        page_bytes = int(db.execute("PRAGMA page_size").fetchone()[0])
        db.execute(f"PRAGMA max_page_count={max(64, max_db_bytes // page_bytes)}")
        check = str(db.execute("PRAGMA quick_check(1)").fetchone()[0])
        if check != "ok":
            raise Unusable("corrupt", f"quick_check: {check}")
        _migrate(db)
        check_version(db)
        if schema_of(db)[0] == SCHEMA_VERSION:  # a newer one keeps its own header
            oldest = oldest_user(SCHEMA_VERSION, BREAKING_MIGRATIONS)
            db.execute(f"PRAGMA user_version = {oldest}")
    except BaseException:
        db.close()
        raise
    return db


def open_writable(path: Path, max_db_bytes: int) -> sqlite3.Connection:
    """The database, or a fresh one after moving an unusable one aside; at worst one in
    memory.  Never raises: an agent that exits on its store crash-loops on the node."""
    try:
        return _connect(path, max_db_bytes)
    except (sqlite3.Error, Unusable, OSError) as exc:
        reason = unusable_reason(exc)
        if reason is not None and path.exists():
            try:
                aside = move_aside(path, reason)
                log.error(
                    "store_unusable",
                    extra={
                        "path": str(path),
                        "error": str(exc),
                        "moved_to": aside.name,
                        "consequence": "a fresh store",
                    },
                )
                return _connect(path, max_db_bytes)
            except (sqlite3.Error, Unusable, OSError) as again:
                exc = again
        log.error(
            "store_unusable",
            extra={
                "path": str(path),
                "error": str(exc),
                "consequence": "incidents kept in memory only until the agent restarts",
            },
        )
        return _connect(":memory:", max_db_bytes)


def take_back(db: sqlite3.Connection, path: Path) -> None:
    """The incidents an older agent set aside in a rollback, if this agent may use them."""
    if not db.execute("PRAGMA database_list").fetchone()[2]:
        return  # the store fell back to memory: leave the files for a later start
    try:
        take_back_set_aside(db, path, SCHEMA_VERSION)
    except (sqlite3.Error, OSError) as exc:
        log.warning("store_set_aside_unreadable", extra={"path": str(path), "error": str(exc)})


def _migrate(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations"
        " (version INTEGER PRIMARY KEY, applied_at_s REAL NOT NULL)"
    )
    current = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
    for version in range(int(current[0]) + 1, SCHEMA_VERSION + 1):
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in MIGRATIONS[version - 1].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, time.time()))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


def check_version(db: sqlite3.Connection) -> None:
    """A newer schema is used as it is when its header says this agent may; refused
    (moved aside by a writer) otherwise."""
    version, oldest = schema_of(db)
    if not usable(version, oldest, SCHEMA_VERSION):
        raise Unusable(
            NEWER,
            f"schema {version}, newer than this oomwatch's ({SCHEMA_VERSION}) and not"
            f" usable by it (a newer oomwatch reads it)",
        )


def _private_file(path: Path) -> None:
    """The database file created (or narrowed to) owner-only before SQLite opens it: it
    holds every kill's pod, command lines and allocator state, and SQLite gives its WAL
    files the database's mode.  Reading a report needs the agent's uid, as the log does."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        mode = os.fstat(fd).st_mode
        if mode & 0o077:
            os.fchmod(fd, mode & 0o700)
    except OSError:  # not ours to narrow: left as its owner made it
        pass
    finally:
        os.close(fd)
