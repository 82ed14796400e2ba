"""Every table has a cap and a per-pod share: one pod's kill storm keeps the rest of the
node's kernel-kill history, and a container cycling through pre-OOM warnings fills only its
share of the forecasts table, never the store's room for kernel kills."""

from __future__ import annotations

from pathlib import Path

from oomwatch.incident import Incident, IncidentKind, Victim
from oomwatch.store import (
    CGROUP_SHARE_FORECASTS,
    MAX_FORECASTS,
    POD_SHARE_KERNEL_KILLS,
    POD_SHARE_OTHER_INCIDENTS,
    IncidentStore,
)

STORM, QUIET = "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002"


def kill(i: int, pod_uid: str | None, kind: IncidentKind = "memcg") -> Incident:
    return Incident(
        kind=kind,
        boot_id="b",
        kernel_time_s=float(i),
        pod_uid=pod_uid,
        victims=[Victim(pid=1000 + i, comm="w")],
    )


def kinds(store: IncidentStore, pod_uid: str | None) -> int:
    where = "pod_uid IS NULL" if pod_uid is None else "pod_uid = ?"
    args = () if pod_uid is None else (pod_uid,)
    return int(
        store._db.execute(f"SELECT COUNT(*) FROM incidents WHERE {where}", args).fetchone()[0]
    )


def test_one_pods_kill_storm_keeps_its_share_and_the_others_history(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path, max_incidents=2_000, max_other_incidents=400)
    for i in range(20):
        store.add(kill(i, QUIET))
    for i in range(20, 20 + 3 * POD_SHARE_KERNEL_KILLS):
        store.add(kill(i, STORM))
    for i in range(5_000, 5_000 + 3 * POD_SHARE_OTHER_INCIDENTS):
        store.add(kill(i, None, kind="framework"))  # unvouched: one key for all of them
    store.prune()
    assert kinds(store, QUIET) == 20  # kept past the storm's newer kills
    assert kinds(store, STORM) == POD_SHARE_KERNEL_KILLS
    assert kinds(store, None) == POD_SHARE_OTHER_INCIDENTS
    store.close()


def test_forecasts_have_a_cap_and_a_share_per_container(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    for i in range(3 * CGROUP_SHARE_FORECASTS):
        store.add_warning("/kubepods/cycling", STORM, None, 1e9 + i, {"n": i})
    store.add_warning("/kubepods/other", QUIET, None, 1e9, {"n": 0})
    store.prune(now_s=1e9 + 10)
    rows = dict(store._db.execute("SELECT cgroup, COUNT(*) FROM forecasts GROUP BY cgroup"))
    assert rows == {"/kubepods/cycling": CGROUP_SHARE_FORECASTS, "/kubepods/other": 1}
    assert MAX_FORECASTS >= 10 * CGROUP_SHARE_FORECASTS
    store.close()
