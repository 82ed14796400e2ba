"""The SQLite incident store: dedupe, queries, cursor, retention, schema version, read-only."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from oomwatch.cgroups.counters import OomCounters
from oomwatch.incident import Incident, PodContext, TaskRow, Victim
from oomwatch.sources.kmsg import KmsgCursor
from oomwatch.store import SCHEMA_VERSION, IncidentStore, StoreError
from oomwatch.store.limits import MAX_TASK_ROWS
from oomwatch.store.schema import MIGRATIONS

BOOT = "b0"


def kill(pid: int, at: str, *, pod: str = "web-1", cid: str = "c" * 64) -> Incident:
    return Incident(
        kind="memcg",
        boot_id=BOOT,
        kernel_time_s=float(pid),
        wall_time=at,
        task_memcg=f"/kubepods/burstable/podu/{cid}",
        victims=[Victim(pid=pid, comm="java")],
        pod_uid="u",
        container_id=cid,
        k8s=PodContext(namespace="shop", pod=pod, container="app"),
    )


def test_add_dedupes_and_roundtrips(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    first = kill(1, "2026-11-22T08:00:00+00:00")
    assert store.add(first) is True
    assert store.add(kill(1, "2026-11-22T08:00:00+00:00")) is False
    assert store.query() == [first]


def test_header_suppressed_kill_dedupes_whatever_cgroup_it_was_given(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    a = Incident(
        kind="memcg",
        boot_id=BOOT,
        kernel_time_s=5.0,
        header_suppressed=True,
        victims=[Victim(pid=9, comm="x")],
        task_memcg="/a",
    )
    b = Incident(
        kind="memcg",
        boot_id=BOOT,
        kernel_time_s=5.0,
        header_suppressed=True,
        victims=[Victim(pid=9, comm="x")],
    )
    assert store.add(a) and not store.add(b)


def test_counter_only_kills_are_each_their_own(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    missing = Incident(kind="unknown", boot_id=BOOT, kmsg_missing=True, task_memcg="/a")
    assert store.add(missing) and store.add(Incident.from_dict(missing.to_dict()))
    assert store.count() == 2


def test_query_filters(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    for i, pod in enumerate(["web-1", "web-2", "web-1"]):
        store.add(kill(i + 1, f"2026-11-22T08:0{i}:00+00:00", pod=pod))
    assert [i.victims[0].pid for i in store.query(pod="web-1")] == [1, 3]
    assert [i.victims[0].pid for i in store.query(pod="shop/web-2")] == [2]
    assert [i.victims[0].pid for i in store.query(pod="u")] == [1, 2, 3]
    assert [i.victims[0].pid for i in store.query(last=2)] == [2, 3]
    since = datetime(2026, 11, 22, 8, 1, tzinfo=UTC)
    assert [i.victims[0].pid for i in store.query(since=since)] == [2, 3]


def test_kills_in_window_accepts_runtime_prefix(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    store.add(kill(1, "2026-11-22T08:00:00+00:00"))
    at = datetime(2026, 11, 22, 8, tzinfo=UTC).timestamp()
    assert store.kills_in("containerd://" + "c" * 64, at - 1, at + 1) == 1
    assert store.kills_in("c" * 64, at + 1, at + 9) == 0
    assert store.kills_in("d" * 64, at - 1, at + 1) == 0


def test_cursor_persists(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    assert store.load_cursor() is None
    store.save_cursor(KmsgCursor(BOOT, 10))
    store.save_cursor(KmsgCursor(BOOT, 12))
    store.close()
    again = IncidentStore(tmp_path)
    assert again.load_cursor() == KmsgCursor(BOOT, 12)


def test_retention_by_count_and_age(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path, max_incidents=3, max_age_s=3600)
    for pid in range(1, 6):
        store.add(kill(pid, "2026-11-22T08:00:00+00:00"))
    assert store.prune() == 2
    assert [i.victims[0].pid for i in store.query()] == [3, 4, 5]
    far_future = datetime(2100, 1, 1, tzinfo=UTC).timestamp()
    assert store.prune(now_s=far_future) == 3 and store.count() == 0


def test_readonly_reader_sees_writes_and_cannot_write(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=str(tmp_path)):
        IncidentStore.open_readonly(tmp_path)
    writer = IncidentStore(tmp_path)
    reader = IncidentStore.open_readonly(tmp_path)
    writer.add(kill(1, "2026-11-22T08:00:00+00:00"))
    assert len(reader.query()) == 1
    with pytest.raises(sqlite3.OperationalError):
        reader.add(kill(2, "2026-11-22T08:00:00+00:00"))


def test_newer_schema_is_moved_aside_and_refused_by_readers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    IncidentStore(tmp_path).close()
    db = sqlite3.connect(tmp_path / "oomwatch.db")
    db.execute("INSERT INTO schema_migrations VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")  # not usable by older agents
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer"):
        IncidentStore.open_readonly(tmp_path)
    store = IncidentStore(tmp_path)  # the agent: never exits on its store
    assert store.add(kill(1, "2026-11-22T08:00:00+00:00")) and store.count() == 1
    (aside,) = [
        p for p in tmp_path.glob("oomwatch.db.newer-*") if not p.name.endswith(("-wal", "-shm"))
    ]
    assert any(getattr(r, "moved_to", None) == aside.name for r in caplog.records)


def test_status_incidents_are_told_apart_by_pod_container_and_time(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    evicted = Incident(
        kind="eviction", boot_id=BOOT, pod_uid="u1", wall_time="2026-11-22T08:00:00+00:00"
    )
    other_pod = Incident(
        kind="eviction", boot_id=BOOT, pod_uid="u2", wall_time="2026-11-22T08:00:00+00:00"
    )
    later = Incident(
        kind="eviction", boot_id=BOOT, pod_uid="u1", wall_time="2026-11-22T09:00:00+00:00"
    )
    assert store.add(evicted) and store.add(other_pod) and store.add(later)
    assert not store.add(Incident.from_dict(evicted.to_dict()))


def test_checkpoint_saves_cursor_counters_and_pending_together_per_boot(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    assert store.load_checkpoint(BOOT) is None
    counters = {"/kubepods/a": OomCounters(oom=2, oom_kill=2), "/kubepods/b": OomCounters()}
    store.save_checkpoint(BOOT, KmsgCursor(BOOT, 7), counters, {"owed": [["/kubepods/a", 1]]})
    store.save_checkpoint(BOOT, KmsgCursor(BOOT, 9), None, {})  # counters unchanged
    store.save_checkpoint(BOOT, KmsgCursor(BOOT, 10), None, None)  # the cursor alone
    store.close()
    again = IncidentStore(tmp_path)
    saved = again.load_checkpoint(BOOT)
    assert saved is not None and saved.counters == counters and saved.reconcile == {}
    assert again.load_cursor() == KmsgCursor(BOOT, 10)
    assert again.load_checkpoint("another-boot") is None  # counters restart at a reboot


def test_a_version_1_store_is_migrated_keeping_its_incidents(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "oomwatch.db")
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at_s REAL)")
    db.executescript(MIGRATIONS[0])
    db.execute("INSERT INTO schema_migrations VALUES (1, 0)")
    old = kill(1, "2026-11-22T08:00:00+00:00")
    db.execute(
        "INSERT INTO incidents (identity_key, kind, killed_at_s, detected_at_s, data)"
        " VALUES ('k', 'memcg', 1.8e9, 1.8e9, ?)",
        (json.dumps(old.to_dict()),),
    )
    db.commit()
    db.close()
    store = IncidentStore(tmp_path, max_age_s=1e12)
    assert store.query() == [old] and store.load_checkpoint(BOOT) is None
    store.save_checkpoint(BOOT, None, {}, {})
    assert store.load_checkpoint(BOOT) is not None


def test_a_long_task_table_keeps_the_victims_and_the_largest_rows(tmp_path: Path) -> None:
    """A 20,000-row task table is not stored whole (it was 4.3 MB an incident): the victims
    and the largest rows stay."""
    rows = [TaskRow(pid=i, name=f"w{i}", rss_pages=i % 1000) for i in range(20_000)]
    incident = replace(kill(12_345, "2026-11-22T08:00:00+00:00"), tasks=rows)
    store = IncidentStore(tmp_path)
    assert store.add(incident)
    (stored,) = store.query()
    assert len(incident.tasks) == 20_000  # what the sinks saw is not changed
    assert len(stored.tasks) == MAX_TASK_ROWS
    assert 12_345 in {t.pid for t in stored.tasks}  # the victim's row, though small
    assert min(t.rss_pages or 0 for t in stored.tasks if t.pid != 12_345) >= 975
    assert [t.pid for t in stored.tasks] == sorted(t.pid for t in stored.tasks)  # kernel order
    assert any("task table of 20000 rows" in note for note in stored.notes)


def test_pod_caused_incidents_cannot_push_kernel_kills_out(tmp_path: Path) -> None:
    """Framework OOMs, which a pod can make at will, never prune a kernel kill from the store."""
    store = IncidentStore(tmp_path, max_incidents=3, max_other_incidents=2)
    for pid in range(1, 4):
        store.add(kill(pid, "2026-11-22T08:00:00+00:00"))
    for t in range(50):
        store.add(
            Incident(
                kind="framework",
                boot_id=BOOT,
                kernel_time_s=float(t),
                wall_time="2026-11-22T08:01:00+00:00",
                allocator={"file": f"f{t}.ring", "owner_uid": 0},
            )
        )
    store.prune()
    kinds = [i.kind for i in store.query()]
    assert kinds.count("memcg") == 3 and kinds.count("framework") == 2


def test_the_database_file_stays_under_its_cap(tmp_path: Path) -> None:
    cap = 512 * 1024
    store = IncidentStore(tmp_path, max_db_bytes=cap)
    notes = ["x" * 500] * 90  # ~45 KB an incident
    for pid in range(200):
        assert store.add(replace(kill(pid, "2026-11-22T08:00:00+00:00"), notes=notes))
    store.close()
    db = sqlite3.connect(tmp_path / "oomwatch.db")
    pages, size = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "page_size"))
    db.close()
    assert pages * size <= cap
    assert 0 < IncidentStore.open_readonly(tmp_path).count() < 200  # the oldest went


@pytest.mark.parametrize("damage", ["garbage", "page"])
def test_a_corrupt_database_is_moved_aside_and_the_store_starts_fresh(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "oomwatch.db"
    if damage == "garbage":
        db.write_bytes(b"SQLite format 3\0" + bytes(range(256)) * 32)
    else:  # a real database with one of its pages overwritten
        store = IncidentStore(tmp_path)
        for pid in range(300):
            store.add(kill(pid, "2026-11-22T08:00:00+00:00"))
        store.close()
        with open(db, "r+b") as fh:
            fh.seek(4096 * 5)
            fh.write(b"\xa5" * 4096)
    store = IncidentStore(tmp_path)
    assert store.add(kill(1, "2026-11-22T08:00:00+00:00")) and store.count() == 1
    assert [
        p.name
        for p in tmp_path.glob("oomwatch.db.corrupt-*")
        if not p.name.endswith(("-wal", "-shm"))
    ]
    assert any(r.getMessage() == "store_unusable" for r in caplog.records)


def test_a_state_dir_that_cannot_hold_a_database_keeps_incidents_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "state").write_text("a file where the directory should be")
    store = IncidentStore(tmp_path / "state")
    assert store.add(kill(1, "2026-11-22T08:00:00+00:00")) and store.count() == 1
    assert any("in memory only" in getattr(r, "consequence", "") for r in caplog.records)


def test_reads_a_record_oomwatch_0_1_stored(tmp_path: Path) -> None:
    """Records of the version-1 shape (0.1.0: `_kb` fields, the kernel's "no limit" as a
    number) read back in bytes with no limit as None.  The record is what 0.1.0's store
    wrote for corpus file 01 (a group kill at a 7 GiB limit, swap unlimited)."""
    record = (Path(__file__).parent / "data" / "store-record-v1.json").read_text()
    store = IncidentStore(tmp_path)
    store.close()
    db = sqlite3.connect(tmp_path / "oomwatch.db")
    db.execute(
        "INSERT INTO incidents (identity_key, kind, killed_at_s, detected_at_s, data)"
        " VALUES ('v1', 'memcg', 1.0, 1.0, ?)",
        (record,),
    )
    db.commit()
    db.close()
    [incident] = IncidentStore.open_readonly(tmp_path).query()
    assert incident.memcg is not None
    assert incident.memcg.usage_bytes == incident.memcg.limit_bytes == 7464436 * 1024
    assert incident.memcg.swap_usage_bytes == 0 and incident.memcg.swap_limit_bytes is None
    victim = incident.victims[0]
    assert (victim.pid, victim.anon_rss_bytes, victim.pgtables_bytes) == (
        7788,
        7165824 * 1024,
        14076 * 1024,
    )
    assert all(hasattr(t, "swapents_pages") for t in incident.tasks)
    assert incident.tasks and incident.tasks[0].swapents_pages is not None
    # Read back, it is the current shape (its findings are the 0.1.0 diagnosis until the
    # report diagnoses it again, as it does every incident it shows).
    data = incident.to_dict()
    assert "_kb" not in json.dumps([data["memcg"], data["victims"], data["tasks"]])
    assert Incident.from_dict(data) == incident


def test_a_newer_agents_fields_are_left_out(tmp_path: Path) -> None:
    data = kill(1, "2026-11-22T08:00:00+00:00").to_dict()
    data["from_the_future"] = 1
    data["victims"][0]["also_new"] = "x"
    assert Incident.from_dict(data) == kill(1, "2026-11-22T08:00:00+00:00")
