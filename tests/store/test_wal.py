"""The store's WAL checkpoints run on their own thread when asked, never in a commit."""

from __future__ import annotations

from pathlib import Path

from support import until

from oomwatch.incident import Incident, PodContext, Victim
from oomwatch.store import IncidentStore
from oomwatch.store.wal import wal_frames


def _kill(pid: int) -> Incident:
    return Incident(
        kind="memcg",
        boot_id="b0",
        kernel_time_s=float(pid),
        wall_time="2026-11-27T08:00:00+00:00",
        task_memcg="/kubepods/burstable/podu/" + "c" * 64,
        victims=[Victim(pid=pid, comm="java")],
        pod_uid="u",
        container_id="c" * 64,
        k8s=PodContext(namespace="shop", pod="web-1", container="app"),
    )


def test_commits_leave_the_checkpoint_to_the_thread_that_runs_it_when_asked(
    tmp_path: Path,
) -> None:
    store = IncidentStore(tmp_path)
    checkpoints = store.checkpoint_in_background()
    assert checkpoints is not None
    try:
        # a commit checkpoints only if the thread falls far behind (the WAL stays bounded)
        assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 4000
        for pid in range(1, 41):
            store.add(_kill(pid))
        frames = wal_frames(store.path)
        assert frames >= 40  # every commit appended; none checkpointed
        assert not checkpoints.ask_if_due(frames + 1)  # below what it asks at
        assert checkpoints.ask_if_due(frames)
        until("the thread's checkpoint", lambda: checkpoints.done or None, 30.0, 0.01)
        assert checkpoints.done == 1
        # the whole WAL went into the database, and the thread's own write started it again
        # (the sync of its new header is not left to the next kill's commit)
        assert wal_frames(store.path) == 1  # the thread's own page, in a WAL started again
        store.add(_kill(41))
        assert wal_frames(store.path) > 1  # appended behind it: the commit ran no checkpoint
        assert [i.victim.pid for i in store.query() if i.victim] == list(range(1, 42))
    finally:
        checkpoints.stop()
        store.close()


def test_with_the_thread_the_owner_prunes_at_its_tick_and_an_add_never_does(
    tmp_path: Path,
) -> None:
    """Retention every 100 adds ran inside the 100th add (a kill's commit); with the WAL
    thread the owner (the agent's tick) prunes when `prune_due` says so."""
    alone = IncidentStore(tmp_path / "alone", max_incidents=10)
    for pid in range(1, 101):
        alone.add(_kill(pid))
    assert alone.count() == 10 and not alone.prune_due  # the 100th add pruned
    alone.close()
    store = IncidentStore(tmp_path / "agent", max_incidents=10)
    checkpoints = store.checkpoint_in_background()
    assert checkpoints is not None
    try:
        for pid in range(1, 101):
            store.add(_kill(pid))
        assert store.count() == 100 and store.prune_due
        assert store.prune() == 90
        assert store.count() == 10 and not store.prune_due
    finally:
        checkpoints.stop()
        store.close()


def test_a_store_in_memory_or_read_only_has_no_checkpoint_thread(tmp_path: Path) -> None:
    IncidentStore(tmp_path).close()
    reader = IncidentStore.open_readonly(tmp_path)
    try:
        assert reader.checkpoint_in_background() is None
    finally:
        reader.close()
    assert wal_frames(tmp_path / "nothing.db") == 0
