"""How much the store keeps: by age, and by count separately for kernel kills and for what
pods can cause (framework OOMs, evictions), so a pod cannot push a kernel kill out; within
each, one pod's share (a storm keeps its newest, the others' history stays); and what goes
first when the file is full.  Sizes in bytes are oomwatch.store.limits'.
"""

from __future__ import annotations

import sqlite3

from oomwatch.incident import KERNEL_KILL_KINDS

__all__ = [
    "CGROUP_SHARE_FORECASTS",
    "DEFAULT_MAX_AGE_SECONDS",
    "DEFAULT_MAX_INCIDENTS",
    "DEFAULT_MAX_OTHER_INCIDENTS",
    "MAX_FORECASTS",
    "POD_SHARE_KERNEL_KILLS",
    "POD_SHARE_OTHER_INCIDENTS",
    "drop_oldest_tenth",
    "prune",
]

DEFAULT_MAX_INCIDENTS = 10_000  # kernel kills
DEFAULT_MAX_OTHER_INCIDENTS = 2_000  # framework OOMs, evictions, false OOMKilled reports
DEFAULT_MAX_AGE_SECONDS = 30 * 24 * 3600.0
# One pod's share of each class (a kill storm, a flood of framework OOMs, a container
# cycling through warnings keeps its newest this many; the others' history stays).
# Kills outside a pod (system services) and unvouched framework OOMs share one key.
POD_SHARE_KERNEL_KILLS = 1_000
POD_SHARE_OTHER_INCIDENTS = 200
MAX_FORECASTS = 5_000
CGROUP_SHARE_FORECASTS = 100
_POD_KEY = "COALESCE(pod_uid, '')"


def prune(db: sqlite3.Connection, cutoff_s: float, max_incidents: int, max_other: int) -> None:
    """Drop incidents and warnings older than `cutoff_s` (epoch) and beyond the counts."""
    db.execute("DELETE FROM incidents WHERE detected_at_s < ?", (cutoff_s,))
    db.execute("DELETE FROM forecasts WHERE started_at_s < ?", (cutoff_s,))
    _keep_newest(db, "forecasts", "cgroup", CGROUP_SHARE_FORECASTS)
    db.execute(
        "DELETE FROM forecasts WHERE id IN (SELECT id FROM forecasts"
        " ORDER BY id DESC LIMIT -1 OFFSET ?)",
        (MAX_FORECASTS,),
    )
    kernel = ",".join(f"'{k}'" for k in KERNEL_KILL_KINDS)
    for where, keep, share in (
        (f"kind IN ({kernel})", max_incidents, POD_SHARE_KERNEL_KILLS),
        (f"kind NOT IN ({kernel})", max_other, POD_SHARE_OTHER_INCIDENTS),
    ):
        _keep_newest(db, "incidents", _POD_KEY, share, where)
        db.execute(
            f"DELETE FROM incidents WHERE id IN (SELECT id FROM incidents WHERE {where}"
            " ORDER BY id DESC LIMIT -1 OFFSET ?)",
            (keep,),
        )


def drop_oldest_tenth(db: sqlite3.Connection) -> int:
    """The file is full: drop the oldest tenth of what pods can cause, and of kernel kills
    only when that freed nothing; in each, of the pod holding the most (a storm fills the
    file with its own kills, and loses its own).  Returns how many went."""
    kernel = ",".join(f"'{k}'" for k in KERNEL_KILL_KINDS)
    for where in (f"kind NOT IN ({kernel})", f"kind IN ({kernel})"):
        largest = f"(SELECT {_POD_KEY} FROM incidents WHERE {where} GROUP BY 1 ORDER BY COUNT(*) DESC LIMIT 1)"  # noqa: E501
        removed = db.execute(
            f"DELETE FROM incidents WHERE id IN (SELECT id FROM incidents WHERE {where}"
            f" AND {_POD_KEY} = {largest}"
            " ORDER BY id LIMIT MAX(1, (SELECT COUNT(*) FROM incidents) / 10))"
        ).rowcount
        if removed:
            return int(removed)
    return 0


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
