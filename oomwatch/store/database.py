"""The incident store: SQLite in the state dir, shared by the daemon and `oomwatch report`.

Incidents are kept whole as the JSON of `Incident.to_dict()` (the contract), with a few
indexed columns for the queries we answer.  The same file keeps the daemon's checkpoint:
the kmsg cursor, so a restarted daemon neither repeats nor skips kernel log records, and
(for the same boot) the cgroup OOM counters every recorded kill explains plus what the
reconciliation still waited on, so kills counted while the daemon was down are recorded.
WAL lets `oomwatch report --store` read while the daemon writes.  Retention is bounded by
count and age, separately for kernel kills and for what pods can cause (framework OOMs,
evictions), so a pod cannot push a kernel kill out; each incident and the whole file are
size-capped (oomwatch.store.limits), and a database that cannot be used is moved aside.
Which agent may use a database of which schema (rollbacks) is oomwatch.store.upgrade's.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from oomwatch.cgroups.counters import OomCounters
from oomwatch.incident import KERNEL_KILL_KINDS, Incident, iso_epoch_s, kill_epoch_s
from oomwatch.sources.kmsg import KmsgCursor
from oomwatch.store import checkpoint as checkpoint_table
from oomwatch.store import forecasts as forecast_table
from oomwatch.store.checkpoint import Checkpoint
from oomwatch.store.forecasts import StoredWarning
from oomwatch.store.keys import store_key
from oomwatch.store.limits import MAX_DB_BYTES, bounded, capped, move_aside
from oomwatch.store.schema import BREAKING_MIGRATIONS, MIGRATIONS, SCHEMA_VERSION
from oomwatch.store.upgrade import NEWER, oldest_user, schema_of, take_back_set_aside, usable

__all__ = [
    "BREAKING_MIGRATIONS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Checkpoint",
    "IncidentStore",
    "StoreError",
    "StoredWarning",
    "store_key",
]

log = logging.getLogger("oomwatch.store")

DB_NAME = "oomwatch.db"
DEFAULT_MAX_INCIDENTS = 10_000  # kernel kills
DEFAULT_MAX_OTHER_INCIDENTS = 2_000  # framework OOMs, evictions, false OOMKilled reports
DEFAULT_MAX_AGE_SECONDS = 30 * 24 * 3600.0
_PRUNE_EVERY_ADDS = 100
# One pod's share of each class (a kill storm, a flood of framework OOMs, a container
# cycling through warnings keeps its newest this many; the others' history stays).
# Kills outside a pod (system services) and unvouched framework OOMs share one key.
POD_SHARE_KERNEL_KILLS = 1_000
POD_SHARE_OTHER_INCIDENTS = 200
MAX_FORECASTS = 5_000
CGROUP_SHARE_FORECASTS = 100
_POD_KEY = "COALESCE(pod_uid, '')"


class StoreError(Exception):
    """The state dir or its database cannot be used (names the path)."""


class _Unusable(StoreError):
    """A database the agent moves aside: `reason` is corrupt or newer (its schema)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


_CORRUPT_CODES = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB


def _unusable_reason(exc: BaseException) -> str | None:
    """`corrupt`/`newer` for a database to move aside; None for other failures (a read-only
    or full disk, permissions), where moving the file would not help."""
    if isinstance(exc, _Unusable):
        return exc.reason
    code = getattr(exc, "sqlite_errorcode", None)
    return "corrupt" if isinstance(code, int) and code & 0xFF in _CORRUPT_CODES else None


_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    @functools.wraps(method)
    def wrapper(self: IncidentStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(_F, wrapper)


class IncidentStore:
    """Read-write (daemon) or read-only (`oomwatch report`) access to the state dir's store."""

    def __init__(
        self,
        state_dir: Path,
        *,
        max_incidents: int = DEFAULT_MAX_INCIDENTS,
        max_other_incidents: int = DEFAULT_MAX_OTHER_INCIDENTS,
        max_age_s: float = DEFAULT_MAX_AGE_SECONDS,
        max_db_bytes: int = MAX_DB_BYTES,
        _readonly: bool = False,
    ) -> None:
        self.path = Path(state_dir) / DB_NAME
        self.readonly = _readonly
        self._max_incidents = max_incidents
        self._max_other = max_other_incidents
        self._max_age_s = max_age_s
        self._max_db_bytes = max_db_bytes
        self._adds = 0
        # One connection, used from whichever thread runs the pipeline; calls are serialized.
        self._lock = threading.RLock()
        if _readonly:
            if not self.path.is_file():
                raise StoreError(f"no incident store at {self.path}")
            try:
                self._db = sqlite3.connect(
                    f"file:{self.path}?mode=ro",
                    uri=True,
                    timeout=5.0,
                    isolation_level=None,
                    check_same_thread=False,
                )
                self._check_version()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open incident store {self.path}: {exc}") from exc
        else:
            self._db = self._open_writable()
            self._take_back_set_aside()
            self.prune()

    def _connect(self, target: Path | str) -> sqlite3.Connection:
        """A writable connection, size-capped, checked, migrated (closed again on failure)."""
        if isinstance(target, Path):
            _private_file(target)
        db = sqlite3.connect(target, timeout=5.0, isolation_level=None, check_same_thread=False)
        self._db = db
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(f"PRAGMA journal_size_limit={16 << 20}")
            page_bytes = int(db.execute("PRAGMA page_size").fetchone()[0])
            db.execute(f"PRAGMA max_page_count={max(64, self._max_db_bytes // page_bytes)}")
            check = str(db.execute("PRAGMA quick_check(1)").fetchone()[0])
            if check != "ok":
                raise _Unusable("corrupt", f"quick_check: {check}")
            self._migrate()
            self._check_version()
            if schema_of(db)[0] == SCHEMA_VERSION:  # a newer one keeps its own header
                oldest = oldest_user(SCHEMA_VERSION, BREAKING_MIGRATIONS)
                db.execute(f"PRAGMA user_version = {oldest}")
        except BaseException:
            db.close()
            raise
        return db

    def _open_writable(self) -> sqlite3.Connection:
        """The database, or a fresh one after moving an unusable one aside; at worst one in
        memory.  Never raises: an agent that exits on its store crash-loops on the node."""
        try:
            return self._connect(self.path)
        except (sqlite3.Error, _Unusable, OSError) as exc:
            reason = _unusable_reason(exc)
            if reason is not None and self.path.exists():
                try:
                    aside = move_aside(self.path, reason)
                    log.error("store_unusable", extra={
                        "path": str(self.path), "error": str(exc), "moved_to": aside.name,
                        "consequence": "a fresh store"})  # fmt: skip
                    return self._connect(self.path)
                except (sqlite3.Error, _Unusable, OSError) as again:
                    exc = again
            log.error(
                "store_unusable",
                extra={
                    "path": str(self.path),
                    "error": str(exc),
                    "consequence": "incidents kept in memory only until the agent restarts",
                },
            )
            return self._connect(":memory:")

    def _take_back_set_aside(self) -> None:
        """The incidents an older agent set aside in a rollback, if this agent may use them."""
        if not self._db.execute("PRAGMA database_list").fetchone()[2]:
            return  # the store fell back to memory: leave the files for a later start
        try:
            take_back_set_aside(self._db, self.path, SCHEMA_VERSION)
        except (sqlite3.Error, OSError) as exc:
            log.warning(
                "store_set_aside_unreadable", extra={"path": str(self.path), "error": str(exc)}
            )

    @classmethod
    def open_readonly(cls, state_dir: Path) -> IncidentStore:
        """For readers (`oomwatch report --store DIR`): never creates or changes anything."""
        return cls(Path(state_dir), _readonly=True)

    def _migrate(self) -> None:
        db = self._db
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

    def _check_version(self) -> None:
        """A newer schema is used as it is when its header says this agent may; refused
        (moved aside by a writer) otherwise."""
        version, oldest = schema_of(self._db)
        if not usable(version, oldest, SCHEMA_VERSION):
            raise _Unusable(
                NEWER,
                f"schema {version}, newer than this oomwatch's ({SCHEMA_VERSION}) and not"
                f" usable by it (a newer oomwatch reads it)",
            )

    # --- incidents ---

    @_locked
    def add(self, incident: Incident) -> bool:
        """Store one incident (size-capped); False if the same kill is already stored.

        A full database (`max_db_bytes`) drops its oldest incidents and tries again; a
        database found corrupt now is moved aside and the incident goes in a fresh one."""
        stored, data = bounded(incident)
        now_s = time.time()
        ctx = stored.k8s
        row = (
            store_key(stored),
            stored.kind,
            stored.boot_id,
            stored.kmsg_seq,
            killed_at if (killed_at := kill_epoch_s(stored)) is not None else now_s,
            iso_epoch_s(stored.detected_at) or now_s,
            stored.pod_uid,
            stored.container_id,
            ctx.namespace if ctx else None,
            ctx.pod if ctx else None,
            data,
        )
        sql = (
            "INSERT OR IGNORE INTO incidents (identity_key, kind, boot_id, kmsg_seq, killed_at_s,"
            " detected_at_s, pod_uid, container_id, namespace, pod, data)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        try:
            cur = self._db.execute(sql, row)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF == 13:  # SQLITE_FULL
                self._make_room()
            elif _unusable_reason(exc) is not None and not self.readonly:
                self._db.close()
                self._db = self._open_writable()
            else:
                raise
            cur = self._db.execute(sql, row)
        added = cur.rowcount == 1
        if added:
            self._adds += 1
            if self._adds % _PRUNE_EVERY_ADDS == 0:
                self.prune()
        return added

    def _make_room(self) -> None:
        """The file reached `max_db_bytes`: drop the oldest tenth of what pods can cause,
        and of kernel kills only when that freed nothing; in each, of the pod holding the
        most (a storm fills the file with its own kills, and loses its own)."""
        kernel = ",".join(f"'{k}'" for k in KERNEL_KILL_KINDS)
        for where in (f"kind NOT IN ({kernel})", f"kind IN ({kernel})"):
            largest = f"(SELECT {_POD_KEY} FROM incidents WHERE {where} GROUP BY 1 ORDER BY COUNT(*) DESC LIMIT 1)"  # noqa: E501
            removed = self._db.execute(
                f"DELETE FROM incidents WHERE id IN (SELECT id FROM incidents WHERE {where}"
                f" AND {_POD_KEY} = {largest}"
                " ORDER BY id LIMIT MAX(1, (SELECT COUNT(*) FROM incidents) / 10))"
            ).rowcount
            if removed:
                log.warning("store_full", extra={"path": str(self.path), "dropped_oldest": removed})
                return

    def iter_query(
        self,
        since: datetime | None = None,
        pod: str | None = None,
        last: int | None = None,
    ) -> Iterator[Incident]:
        """`query()` one incident at a time (for readers: holds no lock while iterating)."""
        where: list[str] = []
        params: list[object] = []
        if since is not None:
            if since.tzinfo is None:
                since = since.replace(tzinfo=UTC)
            where.append("killed_at_s >= ?")
            params.append(since.timestamp())
        if pod is not None:
            namespace, _, name = pod.rpartition("/")
            if namespace:
                where.append("namespace = ? AND pod = ?")
                params += [namespace, name]
            else:
                where.append("(pod = ? OR pod_uid = ?)")
                params += [pod, pod]
        sql = "SELECT id, killed_at_s, data FROM incidents"
        if where:
            sql += " WHERE " + " AND ".join(where)
        if last is not None:
            sql = f"SELECT * FROM ({sql} ORDER BY killed_at_s DESC, id DESC LIMIT ?)"
            params.append(max(0, last))
        sql += " ORDER BY killed_at_s, id"
        for row in self._db.execute(sql, params):  # capped: a store may predate the caps
            yield capped(Incident.from_dict(json.loads(row[2])))

    @_locked
    def query(
        self,
        since: datetime | None = None,
        pod: str | None = None,
        last: int | None = None,
    ) -> list[Incident]:
        """Incidents oldest first; `pod` matches the pod name, `namespace/pod` or the pod UID.

        `last` keeps only the newest N of the matches.
        """
        return list(self.iter_query(since, pod, last))

    @_locked
    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM incidents").fetchone()[0])

    @_locked
    def kills_in(self, container_id: str, since_s: float, until_s: float) -> int:
        """Kernel kills stored for a container between two epoch times (inclusive).

        Accepts the runtime-prefixed form Kubernetes shows (`containerd://<id>`).
        """
        bare = container_id.rpartition("://")[2]
        marks = ",".join("?" for _ in KERNEL_KILL_KINDS)
        row = self._db.execute(
            "SELECT COUNT(*) FROM incidents WHERE container_id = ?"
            f" AND killed_at_s BETWEEN ? AND ? AND kind IN ({marks})",
            (bare, since_s, until_s, *KERNEL_KILL_KINDS),
        ).fetchone()
        return int(row[0])

    @_locked
    def prune(self, now_s: float | None = None) -> int:
        """Drop incidents beyond the retention bounds (age; count per class: kernel kills,
        and the rest); returns how many were removed."""
        if self.readonly:
            return 0
        now_s = time.time() if now_s is None else now_s
        before = self.count()
        cutoff_s = now_s - self._max_age_s
        self._db.execute("DELETE FROM incidents WHERE detected_at_s < ?", (cutoff_s,))
        self._db.execute("DELETE FROM forecasts WHERE started_at_s < ?", (cutoff_s,))
        _keep_newest(self._db, "forecasts", "cgroup", CGROUP_SHARE_FORECASTS)
        self._db.execute(
            "DELETE FROM forecasts WHERE id IN (SELECT id FROM forecasts"
            " ORDER BY id DESC LIMIT -1 OFFSET ?)",
            (MAX_FORECASTS,),
        )
        kernel = ",".join(f"'{k}'" for k in KERNEL_KILL_KINDS)
        for where, keep, share in (
            (f"kind IN ({kernel})", self._max_incidents, POD_SHARE_KERNEL_KILLS),
            (f"kind NOT IN ({kernel})", self._max_other, POD_SHARE_OTHER_INCIDENTS),
        ):
            _keep_newest(self._db, "incidents", _POD_KEY, share, where)
            self._db.execute(
                f"DELETE FROM incidents WHERE id IN (SELECT id FROM incidents WHERE {where}"
                " ORDER BY id DESC LIMIT -1 OFFSET ?)",
                (keep,),
            )
        return before - self.count()

    # --- pre-OOM warnings: oomwatch.store.forecasts ---

    @_locked
    def add_warning(
        self,
        cgroup: str,
        pod_uid: str | None,
        container_id: str | None,
        started_at_s: float,
        data: Mapping[str, Any],
    ) -> int:
        """Record a warning (a `MemoryLimitApproaching` forecast) as it starts; returns its id."""
        return forecast_table.add(self._db, cgroup, pod_uid, container_id, started_at_s, data)

    @_locked
    def end_warning(self, warning_id: int, ended_at_s: float, outcome: str) -> None:
        """`killed` (the kill came) or `cleared` (the forecast went away); the first word stays."""
        forecast_table.end(self._db, warning_id, ended_at_s, outcome)

    @_locked
    def warning_before(self, cgroup: str, at_s: float, grace_s: float) -> StoredWarning | None:
        """The latest warning of a cgroup that started by `at_s` and was still in force, or
        ended at most `grace_s` before it (a kill may come while the forecast wavers)."""
        return forecast_table.before(self._db, cgroup, at_s, grace_s)

    @_locked
    def warnings(self, since_s: float = 0.0) -> list[StoredWarning]:
        """Warnings started since an epoch time, oldest first (bench, report)."""
        return forecast_table.since(self._db, since_s)

    # --- kmsg cursor and checkpoint: oomwatch.store.checkpoint ---

    @_locked
    def load_cursor(self) -> KmsgCursor | None:
        return checkpoint_table.load_cursor(self._db)

    @_locked
    def save_cursor(self, cursor: KmsgCursor) -> None:
        checkpoint_table.save_cursor(self._db, cursor)

    @_locked
    def save_checkpoint(
        self,
        boot_id: str,
        cursor: KmsgCursor | None,
        counters: Mapping[str, OomCounters] | None,
        reconcile: Mapping[str, Any] | None,
    ) -> None:
        """Save all three together so they never disagree; `None` keeps what was saved for
        this boot before (the first checkpoint of a run saves everything)."""
        checkpoint_table.save(self._db, boot_id, cursor, counters, reconcile)

    @_locked
    def load_checkpoint(self, boot_id: str) -> Checkpoint | None:
        """The checkpoint of this boot (counters reset at reboot), or None."""
        return checkpoint_table.load(self._db, boot_id)

    @_locked
    def close(self) -> None:
        self._db.close()


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


def _keep_newest(
    db: sqlite3.Connection, table: str, key: str, share: int, where: str = "1"
) -> None:
    """Delete the rows of `table` (matching `where`) beyond the newest `share` of each `key`."""
    db.execute(
        f"DELETE FROM {table} WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER"
        f" (PARTITION BY {key} ORDER BY id DESC) AS newer FROM {table} WHERE {where})"
        " WHERE newer > ?)",
        (share,),
    )
