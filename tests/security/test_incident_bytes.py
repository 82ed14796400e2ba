"""Bytes, not counts: what a pod decides (how many processes its container runs,
how many a group kill takes) never decides how much the agent or `oomwatch report` holds.

A 20,000-member group kill is decoded in work linear in its members and stored under the
256 KiB cap; the crash-loop history keeps only what its diagnosis reads of each kill.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

from support.kmsg import GROUP, group_kill
from support.work import calls_made

from oomwatch.decode import decode_kmsg_records
from oomwatch.diagnosis.history import History
from oomwatch.incident import Finding, Incident, PodContext, TaskRow, Victim
from oomwatch.store import IncidentStore
from oomwatch.store.limits import MAX_INCIDENT_BYTES, MAX_VICTIMS, bounded, capped


def test_a_20000_member_group_kill_decodes_in_linear_work_and_keeps_the_first_and_largest() -> None:
    """4x the members cost 4x the calls (a quadratic de-duplication would cost 16x); the
    seconds are `bench/hostile.py --only group` (bench/RESULTS.md)."""
    small = group_kill(5_000)
    small_calls = calls_made(lambda: decode_kmsg_records(small))
    records = group_kill(20_000)
    decoded: list[Incident] = []
    calls = calls_made(lambda: decoded.extend(decode_kmsg_records(records).incidents))
    (incident,) = decoded
    assert calls < 4.5 * small_calls, (calls, small_calls)
    assert incident.group_kill and incident.kills_counted == 20_001
    assert len(incident.victims) <= 2 * MAX_VICTIMS
    assert incident.victim_count == 20_000  # the primary's repeat line counted, not listed
    assert incident.victims[0].pid == 2  # the kernel's choice stays first
    stored, data = bounded(incident)
    assert len(stored.victims) == MAX_VICTIMS and stored.victim_count == 20_000
    assert stored.victims[-1].pid == 20_001  # the largest (anon-rss grows with the pid)
    assert len(data.encode()) <= MAX_INCIDENT_BYTES


def test_every_part_is_held_to_the_incident_byte_cap() -> None:
    """A probe's allocator state, notes, findings: no part of an incident escapes the cap."""
    huge = Incident(
        kind="memcg",
        kernel_time_s=1.0,
        victims=[Victim(pid=1, comm="x")],
        allocator={"segments": ["s" * 1000] * 2000},
        notes=["n" * 500] * 99,
        findings=[Finding("spike", "info", "m", {"rows": ["e" * 1000] * 500})],
    )
    stored, data = bounded(huge)
    assert len(data.encode()) <= MAX_INCIDENT_BYTES
    assert stored.allocator is None
    assert any("allocator state not stored" in n for n in stored.notes)


def big_kill(i: int, rows: int) -> Incident:
    tasks = [TaskRow(pid=100 + r, name=f"worker-{r}", uid=1000, rss_pages=r) for r in range(rows)]
    return Incident(
        kind="memcg",
        kernel_time_s=1000.0 + i,
        wall_time=f"2026-11-26T10:00:{i:02d}+00:00",
        pod_uid="0b7a1c9e-0000-4000-8000-000000000001",
        task_memcg=GROUP,
        k8s=PodContext(namespace="ml", pod="trainer", container="main"),
        tasks=tasks,
        victims=[Victim(pid=100, comm="worker-0")],
    )


def test_the_crash_loop_history_keeps_only_what_its_diagnosis_reads() -> None:
    history = History()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    for i in range(10):
        history.remember(big_kill(i, 3_000))  # each dropped once remembered
    after, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # One 3,000-row kill alone is ~0.7 MiB; 30,000 rows x 8 kills was +105 MiB in the agent.
    assert after - before < 64 * 1024, after - before
    diagnosed = history.diagnose(big_kill(10, 10))
    assert any(f.code == "crash-loop" for f in diagnosed.findings)


def test_a_store_from_before_the_caps_reads_back_capped(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    incident = big_kill(0, 10)
    incident.boot_id = "b"
    incident.victims = [Victim(pid=p, comm="w", anon_rss_bytes=p) for p in range(1, 20_001)]
    assert store.add(incident)
    raw = json.dumps(incident.to_dict())  # as an agent before the victim cap stored it
    store._db.execute("UPDATE incidents SET data = ?", (raw,))
    store._db.commit()
    (read,) = store.iter_query()
    store.close()
    assert len(read.victims) == MAX_VICTIMS and read.victim_count == 20_000


def test_capped_is_idempotent() -> None:
    incident = big_kill(0, 1000)
    once = capped(incident)
    assert capped(once) is once
