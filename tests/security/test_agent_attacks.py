"""The attack table against the real agent (`oomwatch run` over a fake cgroup tree and a
FIFO), each row with the bound it must now hold.  Figures before and after the fixes, and the
commands, are in bench/RESULTS.md (bench/attacks.py runs the same attacks on any checkout).

Rows covered elsewhere: the nesting bomb, device node and junk entries at the reader
(tests/probe/test_reader_bounds.py), claimed pods against the API
(tests/kube/test_kube_probe_identity.py), `oomwatch report` memory
(tests/security/test_report_bounds.py), the annotate grant
(tests/kube/test_kube_admission_policy.py).
"""

from __future__ import annotations

import socket
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from support import settled, until
from support.fifo_agent import REPO, AgentProc, kernel_kill_logged, running_agent
from support.store import settled_incidents, stored

from oomwatch.probe.ring import HEADER_BYTES, RingGeometry, encode_header, encode_slot

pytestmark = pytest.mark.slow


def meta(**claims: Any) -> dict[str, Any]:
    return {
        "pid": 4242,
        "comm": "python3",
        "started_wall_s": time.time() - 60,
        "started_mono_s": max(0.0, time.monotonic() - 60),
        **claims,
    }


def sample(i: int) -> dict[str, Any]:
    return {
        "wall_s": time.time(),
        "mono_s": time.monotonic(),
        "rss_bytes": (500 + i) << 20,
        "phase": "p" * 128,
        "step": i,
        "cuda": {"device": "cuda:0", "reserved_bytes": i},
    }


def oom(i: int) -> dict[str, Any]:
    return {
        "wall_s": time.time(),
        "mono_s": time.monotonic() + i * 1e-3,
        "framework": "torch-cuda",
        "message": "CUDA out of memory. " + "m" * 1000,
    }


def memcg_row_bytes(tmp: Path) -> int | None:
    """The stored size of the memcg kill, once it is stored."""
    con = sqlite3.connect(tmp / "state" / "oomwatch.db")
    try:
        row = con.execute("SELECT length(data) FROM incidents WHERE kind = 'memcg'").fetchone()
    finally:
        con.close()
    return None if row is None else int(row[0])


def put(
    agent: AgentProc,
    name: str,
    geometry: RingGeometry,
    head: dict[str, Any],
    samples: int,
    events: int,
) -> None:
    data = bytearray(geometry.file_bytes)
    data[:HEADER_BYTES] = encode_header(geometry, head)
    for seq in range(1, samples + 1):
        at = geometry.sample_offset(seq)
        data[at : at + geometry.slot_bytes] = encode_slot(seq, sample(seq), geometry.slot_bytes)
    for seq in range(1, events + 1):
        at = geometry.event_offset(seq)
        data[at : at + geometry.slot_bytes] = encode_slot(seq, oom(seq), geometry.slot_bytes)
    tmp = agent.probe_dir / f".{name}"
    tmp.write_bytes(bytes(data))
    tmp.rename(agent.probe_dir / name)


def test_110_full_probe_files_keep_the_agent_far_under_its_limit(tmp_path: Path) -> None:
    """110 full 1 MiB flight records, walked and joined to a kill: the agent's peak RSS
    stays far under its 192 MiB limit."""
    full = RingGeometry(slot_bytes=2048, sample_slots=495, event_slots=16)  # 1,047,552 bytes
    with running_agent(REPO, tmp_path) as agent:
        for i in range(110):
            put(agent, f"t{i}.ring", full, meta(pod_uid=f"p{i}"), 495, 16)
        # the framework polls walk every file before the kill: real time on the poll interval
        # (a walk logs nothing that says it reached the last file)
        time.sleep(8)
        agent.kill()  # and the enricher looks at every file for the kill
        assert kernel_kill_logged(agent, 20_001, 20) is not None
        peak_kib = settled("the agent's peak RSS", lambda: agent.status()["VmHWM"], 1.0, 30.0)
        peak_mib = peak_kib / 1024
        assert agent.get("/healthz")[0] == 200
    assert peak_mib < 110, peak_mib  # measured 54 MiB


def test_a_framework_flood_neither_evicts_kernel_kills_nor_makes_an_incident_per_event(
    tmp_path: Path,
) -> None:
    """45 files x 256 framework OOMs: both kernel kills are logged and stored, and the flood
    costs one owner's burst of incidents, not one per event.  That the walks stay off the
    kernel log's thread is tests/security/test_agent_bytes.py's (strace); how late the flood
    makes the second kill is `bench/attacks.py --only flood` (second_kill_logged_after_s)."""
    many = RingGeometry(slot_bytes=2048, sample_slots=1, event_slots=256)
    with running_agent(REPO, tmp_path) as agent:
        agent.kill()
        assert kernel_kill_logged(agent, 20_001, 10) is not None
        for i in range(45):
            put(agent, f"f{i}.ring", many, meta(pid=1000 + i), 1, 256)
        time.sleep(0.5)  # the kill lands while the flood is being read: that is the test
        agent.kill()
        logged = kernel_kill_logged(agent, 20_002, 30)
        found = settled_incidents(lambda: stored(tmp_path / "state"))
    assert logged is not None
    framework = [i for i in found if i.kind == "framework"]
    kills = {v.pid for i in found if i.kind != "framework" for v in i.victims}
    assert {20_001, 20_002} <= kills
    assert len(framework) <= 10  # one owner's burst; the rest counted and logged


def test_claimed_identities_mint_no_series_and_no_etcd_labels(tmp_path: Path) -> None:
    """Rewritten claims of 300 identities mint no metric series, and no file lends
    itself etcd's labels."""
    tiny = RingGeometry(slot_bytes=2048, sample_slots=1, event_slots=1)
    with running_agent(REPO, tmp_path) as agent:
        put(
            agent,
            "etcd.ring",
            tiny,
            meta(
                pod_uid="e7cd0000-0001",
                namespace="kube-system",
                pod_name="etcd-node-a",
                container="etcd",
            ),
            1,
            1,
        )
        for round_no in range(2):
            for i in range(300):
                claims = {
                    "pod_uid": f"c{round_no}-{i}",
                    "namespace": f"ns{round_no}-{i}",
                    "pod_name": f"p{i}",
                    "container": "c",
                }
                put(agent, f"c{i}.ring", tiny, meta(pid=round_no * 10_000 + i, **claims), 1, 1)
            # each round's claims are read on the framework poll before the next rewrites them
            time.sleep(5)
        metrics = agent.get("/metrics", 30)[1]
    series = [s for s in metrics.splitlines() if s.startswith("oomwatch_framework_oom_total{")]
    assert len(series) == 1 and 'pod_uid=""' in series[0], series
    assert "etcd" not in metrics


def test_600_idle_connections_hold_no_threads_and_scrapes_go_on(tmp_path: Path) -> None:
    """600 idle connections hold no thread, and a scrape is answered while they are all
    still open (the port is 127.0.0.1 behind kube-rbac-proxy in the DaemonSet: tests/kube).
    How long that scrape takes is `bench/attacks.py --only idle_connections` (scrape_s)."""
    with running_agent(REPO, tmp_path) as agent:
        idle = [socket.create_connection(("127.0.0.1", agent.port), timeout=5) for _ in range(600)]
        # every connection accepted (or not): the thread count has gone quiet
        threads = settled("the agent's threads", lambda: agent.status()["Threads"], 1.0, 30.0)
        status, _ = agent.get("/metrics", 10)
        for conn in idle:
            conn.close()
    assert threads <= 6, threads  # none for the connections: measured 4, as before them
    assert status == 200


@pytest.mark.parametrize("damage", ["corrupt", "newer"])
def test_an_unusable_database_is_moved_aside_and_the_agent_runs(
    tmp_path: Path, damage: str
) -> None:
    """A corrupt database, or one from a newer version, is moved aside (a log line says
    where) and the agent records kills in a new one: it never exits on its own store."""
    (tmp_path / "state").mkdir()
    db = tmp_path / "state" / "oomwatch.db"
    if damage == "corrupt":
        db.write_bytes(b"SQLite format 3\0" + bytes(range(256)) * 32)
    else:
        con = sqlite3.connect(db)
        con.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
            " applied_at_s REAL NOT NULL)"
        )
        con.execute("INSERT INTO schema_migrations VALUES (99, 0)")
        con.commit()
        con.close()
    with running_agent(REPO, tmp_path) as agent:
        agent.kill()
        assert kernel_kill_logged(agent, 20_001, 10) is not None
        logs = [
            line
            for _, line in agent.lines
            if line.get("event") == "store_unusable" and line.get("moved_to")
        ]
    assert logs, "no log line says where the database went"
    assert list((tmp_path / "state").glob(f"oomwatch.db.{damage}-*"))


def test_a_20000_row_task_table_is_stored_capped(tmp_path: Path) -> None:
    """A kill with a 20,000-row task table is stored under 64 KiB."""
    with running_agent(REPO, tmp_path) as agent:
        agent.kill(extra_tasks=20_000)
        assert kernel_kill_logged(agent, 20_001, 30) is not None
        size = until("the stored memcg kill", lambda: memcg_row_bytes(tmp_path), 30.0)
    assert size < 64 * 1024, size  # measured 58,006 bytes
