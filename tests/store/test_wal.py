"""The store's WAL checkpoints run on their own thread when asked, never in a commit."""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

from support import until

from oomwatch.incident import Incident, PodContext, Victim
from oomwatch.store import IncidentStore
from oomwatch.store.wal import WalIndex


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
        frames = checkpoints.index.frames()
        assert frames >= 40  # every commit appended; none checkpointed
        assert not checkpoints.ask_if_due(frames + 1)  # below what it asks at
        assert checkpoints.ask_if_due(frames)
        until("the thread's checkpoint", lambda: checkpoints.done or None, 30.0, 0.01)
        assert checkpoints.done == 1
        # the whole WAL went into the database, and the thread's own write started it again
        # (the sync of its new header is not left to the next kill's commit)
        assert checkpoints.index.frames() == 1  # the thread's own page, in a WAL started again
        store.add(_kill(41))
        assert checkpoints.index.frames() > 1  # appended behind it: the commit ran no checkpoint
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
    assert WalIndex(tmp_path / "nothing.db").frames() == 0


def shm_lock_held(shm: Path, offset: int) -> int:
    """The kind of fcntl lock another process holds on one byte of `shm` (F_UNLCK: none);
    this process holds no connection to the store, so closing its descriptor drops nothing."""
    query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
    fd = os.open(shm, os.O_RDONLY)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    finally:
        os.close(fd)
    return int(struct.unpack("hhqqi4x", answer)[0])


# The agent's side: a store with its checkpoint thread, asked once (it reads the WAL's size),
# then written again after another process read the store.
_WRITER = """
import json, sys
from pathlib import Path
from oomwatch.incident import Incident
from oomwatch.store import IncidentStore
first, second = (Incident.from_dict(json.loads(arg)) for arg in sys.argv[2:4])
store = IncidentStore(Path(sys.argv[1]))
checkpoints = store.checkpoint_in_background()
store.add(first)
checkpoints.ask_if_due()
print("asked", flush=True)
sys.stdin.readline()  # another process reads the store meanwhile
store.add(second)
print(len(store.query()), flush=True)
checkpoints.stop()
store.close()
"""


def test_another_process_reading_the_store_leaves_the_agents_wal_index_alone(
    tmp_path: Path,
) -> None:
    """Closing a descriptor of a file drops every fcntl lock its process holds on that file
    (POSIX), SQLite's on the `-shm` among them.  Reading the WAL's size through a descriptor
    of its own, opened and closed at each ask, did that: a reader that opened the store
    next found no lock, took itself for the first user and truncated the `-shm` under the
    agent's mapping, and the agent's next write died of SIGBUS (`oomwatch report --store`
    on the node, or a test polling the store, while the agent ran)."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)]
        + [json.dumps(_kill(pid).to_dict()) for pid in (1, 2)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        assert writer.stdout.readline().strip() == "asked"
        # SQLite's "dead man switch" (os_unix.c, UNIX_SHM_DMS: byte 128 of the -shm), which
        # every process using the store holds shared: a process that finds it unlocked
        # truncates the -shm
        assert shm_lock_held(tmp_path / "oomwatch.db-shm", 128) == fcntl.F_RDLCK
        reader = IncidentStore.open_readonly(tmp_path)
        try:
            assert len(reader.query()) == 1
        finally:
            reader.close()
        writer.stdin.write("go\n")
        writer.stdin.flush()
        out = writer.stdout.readline().strip()
        assert writer.wait(30) == 0, f"the store's owner exited {writer.returncode}"
        assert out == "2"
    finally:
        if writer.poll() is None:
            writer.kill()
