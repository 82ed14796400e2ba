"""The store's SQLite schema as a list of migrations (oomwatch.store applies them in order;
oomwatch.store.upgrade decides which agent may use a database at which version)."""

from __future__ import annotations

# Each entry migrates the schema from version i to i+1; append, never edit.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE incidents (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        identity_key TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        boot_id TEXT,
        kmsg_seq INTEGER,
        killed_at_s REAL NOT NULL,
        detected_at_s REAL NOT NULL,
        pod_uid TEXT,
        container_id TEXT,
        namespace TEXT,
        pod TEXT,
        data TEXT NOT NULL
    );
    CREATE INDEX incidents_killed_at ON incidents (killed_at_s);
    CREATE INDEX incidents_container ON incidents (container_id, killed_at_s);
    CREATE INDEX incidents_pod ON incidents (pod, namespace);
    CREATE TABLE kmsg_cursor (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        boot_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        updated_at_s REAL NOT NULL
    );
    """,
    """
    CREATE TABLE checkpoint (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        boot_id TEXT NOT NULL,
        reconcile TEXT NOT NULL,
        updated_at_s REAL NOT NULL
    );
    CREATE TABLE cgroup_counters (
        relpath TEXT PRIMARY KEY,
        boot_id TEXT NOT NULL,
        oom INTEGER NOT NULL,
        oom_kill INTEGER NOT NULL,
        oom_group_kill INTEGER NOT NULL
    );
    """,
    """
    CREATE TABLE forecasts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        cgroup TEXT NOT NULL,
        pod_uid TEXT,
        container_id TEXT,
        started_at_s REAL NOT NULL,
        ended_at_s REAL,
        outcome TEXT,
        data TEXT NOT NULL
    );
    CREATE INDEX forecasts_cgroup ON forecasts (cgroup, started_at_s);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
# The migrations an agent at the schema before them cannot work with (store_upgrade): add a
# migration's number here unless it only adds tables, indexes or columns with a default.
BREAKING_MIGRATIONS: tuple[int, ...] = (1,)
