"""The incident store: SQLite in the state dir, shared by the daemon and `oomwatch report`.

Incidents are kept whole as the JSON of `Incident.to_dict()` (the contract), with a few
indexed columns for the queries we answer.  The same file keeps the daemon's checkpoint:
the kmsg cursor, so a restarted daemon neither repeats nor skips kernel log records, and
(for the same boot) the cgroup OOM counters every recorded kill explains plus what the
reconciliation still waited on, so kills counted while the daemon was down are recorded.
WAL lets `oomwatch report --store` read while the daemon writes.  Retention is bounded by
count and age, separately for kernel kills and for what pods can cause (framework OOMs,
evictions), so a pod cannot push a kernel kill out; each incident and the whole file are
size-capped (oomwatch.store.limits), and a database that cannot be used is moved aside
(oomwatch.store.opening).  What is kept is oomwatch.store.retention's.
"""

from __future__ import annotations

import functools
import json
import logging
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
from oomwatch.store import retention
from oomwatch.store.checkpoint import Checkpoint
from oomwatch.store.forecasts import StoredWarning
from oomwatch.store.keys import store_key
from oomwatch.store.limits import MAX_DB_BYTES, bounded, capped
from oomwatch.store.opening import (
    StoreError,
    check_version,
    open_writable,
    take_back,
    unusable_reason,
)
from oomwatch.store.retention import (
    DEFAULT_MAX_AGE_SECONDS,
    DEFAULT_MAX_INCIDENTS,
    DEFAULT_MAX_OTHER_INCIDENTS,
)
from oomwatch.store.wal import COMMIT_CHECKPOINT_FRAMES, WalCheckpoints

__all__ = [
    "Checkpoint",
    "IncidentStore",
    "StoreError",
    "StoredWarning",
    "store_key",
]

log = logging.getLogger("oomwatch.store")

DB_NAME = "oomwatch.db"
_PRUNE_EVERY_ADDS = 100

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
        self._prunes_in_add = True  # else the owner calls `prune` when `prune_due` says
        self._checkpoints: WalCheckpoints | None = None  # `checkpoint_in_background`'s
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
                check_version(self._db)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open incident store {self.path}: {exc}") from exc
        else:
            self._db = self._open_writable()
            take_back(self._db, self.path)
            self.prune()

    def _open_writable(self) -> sqlite3.Connection:
        return open_writable(self.path, self._max_db_bytes)

    @classmethod
    def open_readonly(cls, state_dir: Path) -> IncidentStore:
        """For readers (`oomwatch report --store DIR`): never creates or changes anything."""
        return cls(Path(state_dir), _readonly=True)

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
            elif unusable_reason(exc) is not None and not self.readonly:
                self._db.close()
                self._db = self._open_writable()
            else:
                raise
            cur = self._db.execute(sql, row)
        added = cur.rowcount == 1
        if added:
            self._adds += 1
            if self._prunes_in_add and self.prune_due:
                self.prune()
        return added

    @property
    def prune_due(self) -> bool:
        """`_PRUNE_EVERY_ADDS` incidents were added since the last prune."""
        return self._adds >= _PRUNE_EVERY_ADDS

    def _make_room(self) -> None:
        """The file reached `max_db_bytes`: oomwatch.store.retention drops the oldest."""
        removed = retention.drop_oldest_tenth(self._db)
        if removed:
            log.warning("store_full", extra={"path": str(self.path), "dropped_oldest": removed})

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
        self._adds = 0
        before = self.count()
        cutoff_s = now_s - self._max_age_s
        retention.prune(self._db, cutoff_s, self._max_incidents, self._max_other)
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
    def checkpoint_in_background(self) -> WalCheckpoints | None:
        """SQLite's automatic checkpoint moved out of reach on this connection, and a thread
        that runs the checkpoints `WalCheckpoints.ask_if_due` asks for (oomwatch.store.wal:
        a commit runs one only if that thread falls 3,000 pages behind); None where the
        store is not a file (in memory) or is read-only.  Its owner's tick also prunes
        (`prune_due`): `add` no longer does, every 100th time."""
        if self.readonly or not self._db.execute("PRAGMA database_list").fetchone()[2]:
            return None
        self._db.execute(f"PRAGMA wal_autocheckpoint={COMMIT_CHECKPOINT_FRAMES}")
        self._prunes_in_add = False
        self._checkpoints = WalCheckpoints(self.path)
        return self._checkpoints

    def close(self) -> None:
        self._db.close()
        if self._checkpoints is not None:  # its -shm descriptor: only once no lock is needed
            self._checkpoints.index.close()
