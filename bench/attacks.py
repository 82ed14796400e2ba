"""The hostile-input attack table, run against a real `oomwatch run` (fake cgroup tree + FIFO).

    .venv/bin/python bench/attacks.py --repo .              # this tree
    git archive <commit> | tar -x -C /tmp/base
    .venv/bin/python bench/attacks.py --repo /tmp/base      # an older one, same attacks
    .venv/bin/python bench/attacks.py --repo . --only bomb,junk

Each attack prints one JSON line of what it measured; bench/RESULTS.md has both runs.
Attacks that need the API run the agent against tests/support/fakeapi's server.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oomwatch.probe.ring import HEADER_BYTES, RingGeometry, encode_header, encode_slot
from oomwatch.probe.schema import CUDA_KEYS

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from support.fakeapi import FakeApiServer, make_pod, running_status  # noqa: E402
from support.fifo_agent import agent_env, peak_rss_kib, running_agent  # noqa: E402

VICTIM_UID = "0d9c3b1a-5e2f-4a7b-9c8d-112233445566"
VICTIM_CID = "b" * 64
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{url}"}}}}]
users: [{{name: agent, user: {{token: not-a-secret}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: agent}}}}]
current-context: fake
"""


def meta(**claims: Any) -> dict[str, Any]:
    now = time.time()
    return {
        "pid": 4242,
        "comm": "python3",
        "started_wall_s": now - 60,
        "started_mono_s": max(0.0, time.monotonic() - 60),
        **claims,
    }


def sample(i: int, big: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "wall_s": time.time(),
        "mono_s": time.monotonic(),
        "rss_bytes": (500 + i) << 20,
        "step": i,
    }
    if big:  # every field the schema allows, strings at their longest
        out.update(
            uss_bytes=1 << 29,
            anon_bytes=1 << 29,
            anon_huge_bytes=1 << 20,
            shmem_bytes=1 << 20,
            swap_bytes=0,
            phase="p" * 128,
            epoch=3,
            batch_size=256,
            cuda={
                "device": "cuda:0",
                **{k: i for k in CUDA_KEYS if k != "device"},
            },
            tf={"device": "GPU:0", "current_bytes": i, "peak_bytes": i},
        )
    return out


def oom_event(i: int, message: str = "CUDA out of memory.") -> dict[str, Any]:
    return {
        "wall_s": time.time(),
        "mono_s": time.monotonic() + i * 1e-3,
        "framework": "torch-cuda",
        "message": message,
        "device": "cuda:0",
        "requested_bytes": 2 << 30,
    }


def ring(
    geometry: RingGeometry,
    head: dict[str, Any],
    samples: list[dict[str, Any]],
    events: list[dict[str, Any]],
    raw_slots: dict[int, bytes] | None = None,
) -> bytes:
    """A file image; `raw_slots` puts arbitrary payload bytes (with a valid CRC) in a slot."""
    import struct
    import zlib

    data = bytearray(geometry.file_bytes)
    data[:HEADER_BYTES] = encode_header(geometry, head)
    for seq, payload in enumerate(samples, 1):
        off = geometry.sample_offset(seq)
        data[off : off + geometry.slot_bytes] = encode_slot(seq, payload, geometry.slot_bytes)
    for seq, payload in enumerate(events, 1):
        off = geometry.event_offset(seq)
        data[off : off + geometry.slot_bytes] = encode_slot(seq, payload, geometry.slot_bytes)
    for seq, body in (raw_slots or {}).items():
        crc = zlib.crc32(struct.pack("<QI", seq, len(body)) + body)
        slot = (struct.pack("<QII", seq, len(body), crc) + body).ljust(geometry.slot_bytes, b"\0")
        off = geometry.sample_offset(seq)
        data[off : off + geometry.slot_bytes] = slot
    return bytes(data)


def put(directory: Path, name: str, image: bytes, owner: int | None = None) -> None:
    tmp = directory / f".{name}.tmp"
    tmp.write_bytes(image)
    if owner is not None:
        os.chown(tmp, owner, owner)
    os.replace(tmp, directory / name)


def framework_lines(agent: Any) -> list[dict[str, Any]]:
    return [line for _, line in agent.lines if line.get("kind") == "framework"]


# --- the attacks -------------------------------------------------------------------------------


def big_files(repo: Path, tmp: Path) -> dict[str, Any]:
    """110 valid 1 MB files (every slot a full sample, 16 OOM events each)."""
    geometry = RingGeometry(slot_bytes=2048, sample_slots=495, event_slots=16)
    with running_agent(repo, tmp) as agent:
        base = agent.status()
        for i in range(110):
            image = ring(
                geometry,
                meta(pod_uid=f"p{i}"),
                [sample(s, big=True) for s in range(495)],
                [oom_event(e) for e in range(16)],
            )
            put(agent.probe_dir, f"t{i}.ring", image)
        time.sleep(10)  # framework polls read every file
        agent.kill()  # and the enricher reads them all for the kill
        time.sleep(10)
        after = agent.status()
        healthy = agent.get("/healthz")[0]
    return {
        "file_bytes": geometry.file_bytes,
        "rss_before_mib": base["VmRSS"] // 1024,
        "rss_after_mib": after["VmRSS"] // 1024,
        "peak_rss_mib": after["VmHWM"] // 1024,
        "over_192MiB_limit": after["VmHWM"] > 192 * 1024,
        "healthz": healthy,
    }


def _kube_agent(tmp: Path, api: FakeApiServer) -> Path:
    api.put_pod(
        make_pod(
            "billing-0",
            "payments",
            uid=VICTIM_UID,
            statuses=[running_status(VICTIM_CID)],
        )
    )
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(url=api.url))
    return kubeconfig


def claim_pod(repo: Path, tmp: Path) -> dict[str, Any]:
    """A file (owner: nobody) claiming another namespace's pod, by UID or by its cgroup only."""
    results: dict[str, Any] = {}
    for variant, claims in (
        (
            "uid",
            {
                "pod_uid": VICTIM_UID,
                "namespace": "payments",
                "pod_name": "billing-0",
                "container": "app",
            },
        ),
        ("cgroup", {"cgroup": f"/kubepods/burstable/pod{VICTIM_UID}/{VICTIM_CID}"}),
    ):
        api = FakeApiServer().start()
        sub = tmp / variant
        sub.mkdir()
        try:
            kubeconfig = _kube_agent(sub, api)
            with running_agent(repo, sub, "--annotate-pods", kubeconfig=kubeconfig) as agent:
                os.chmod(agent.probe_dir, 0o1777)
                image = ring(
                    RingGeometry(1024, 4, 2),
                    meta(**claims),
                    [sample(0)],
                    [{**oom_event(0), "phase": "ATTACKER-TEXT wire $$ to x"}],
                )
                put(agent.probe_dir, "evil.ring", image, owner=65534)
                time.sleep(8)
            with api.lock:
                events = [e for e in api.events.values() if e["regarding"].get("uid") == VICTIM_UID]
                pod = api.pods[("payments", "billing-0")]
            annotations = pod["metadata"].get("annotations") or {}
            results[variant] = {
                "events_on_victim": len(events),
                "attacker_text_in_note": any("ATTACKER-TEXT" in e.get("note", "") for e in events),
                "annotation_written": "oomwatch.io/last-oom-kill" in annotations,
            }
        finally:
            api.stop()
    return results


def claim_etcd(repo: Path, tmp: Path) -> dict[str, Any]:
    """A file claiming kube-system/etcd-node-a: whose labels does the framework metric get?"""
    with running_agent(repo, tmp) as agent:
        image = ring(
            RingGeometry(1024, 4, 2),
            meta(
                pod_uid="e7cd0000-0000-4000-8000-000000000001",
                namespace="kube-system",
                pod_name="etcd-node-a",
                container="etcd",
            ),
            [sample(0)],
            [{**oom_event(0, "out of memory"), "framework": "torch", "device": None}],
        )
        put(agent.probe_dir, "etcd.ring", image, owner=65534)
        time.sleep(6)
        metrics = agent.get("/metrics")[1]
    series = [
        line for line in metrics.splitlines() if line.startswith("oomwatch_framework_oom_total{")
    ]
    return {
        "framework_series": series,
        "etcd_labels": any('namespace="kube-system"' in s and "etcd" in s for s in series),
    }


def bomb(repo: Path, tmp: Path) -> dict[str, Any]:
    """A 1.3 KB JSON nesting bomb in one slot, and a good file with an OOM written after it."""
    body = b"[" * 1300  # never closed: json.loads recurses past the limit before it sees that
    with running_agent(repo, tmp) as agent:
        image = ring(RingGeometry(2048, 4, 2), meta(), [], [], raw_slots={1: body})
        put(agent.probe_dir, "a-bomb.ring", image)
        time.sleep(1)
        put(
            agent.probe_dir,
            "b-good.ring",
            ring(RingGeometry(1024, 4, 2), meta(), [sample(0)], [oom_event(0)]),
        )
        started = time.monotonic()
        seen = agent.arrival(lambda line: line.get("kind") == "framework", 8.0)
        time.sleep(max(0.0, 5 - (time.monotonic() - started)))
        tracebacks = agent.stderr_tail(1 << 24).count("RecursionError")
        logged = sum("RecursionError" in json.dumps(line) for _, line in agent.lines)
    return {
        "bomb_bytes": len(body),
        "good_file_oom_recorded": seen is not None,
        "recursion_errors_logged": tracebacks + logged,
    }


def flood(repo: Path, tmp: Path) -> dict[str, Any]:
    """45 files x 256 framework OOMs, a kernel kill before and one during the flood."""
    geometry = RingGeometry(slot_bytes=2048, sample_slots=1, event_slots=256)
    with running_agent(repo, tmp) as agent:
        agent.kill()
        agent.arrival(lambda line: line.get("event") == "oom_kill", 10)
        time.sleep(1.5)
        for i in range(45):
            put(
                agent.probe_dir,
                f"f{i}.ring",
                ring(geometry, meta(pid=1000 + i), [sample(0)], [oom_event(e) for e in range(256)]),
            )
        time.sleep(0.5)
        written = agent.kill()
        logged = agent.arrival(
            lambda line: (
                line.get("event") == "oom_kill"
                and line.get("kind") != "framework"
                and line.get("process.pid") == 20_002
            ),
            120,
        )
        time.sleep(10)
    from oomwatch.store import IncidentStore

    store = IncidentStore.open_readonly(tmp / "state")
    try:
        stored = store.query()
    finally:
        store.close()
    kernel = [i for i in stored if i.kind != "framework"]
    return {
        "stored_incidents": len(stored),
        "framework_incidents": len(stored) - len(kernel),
        "kernel_kills_kept": f"{len(kernel)} of 2",
        "second_kill_logged_after_s": round(logged - written, 2) if logged else None,
    }


def churn(repo: Path, tmp: Path) -> dict[str, Any]:
    """1,000 files each claiming a new identity, rewritten twice: framework series count."""
    counts = []
    with running_agent(repo, tmp) as agent:
        for round_no in range(2):
            for i in range(1000):
                claims = {
                    "pod_uid": f"c{round_no}-{i}",
                    "namespace": f"ns{round_no}-{i}",
                    "pod_name": f"p{i}",
                    "container": "c",
                }
                put(
                    agent.probe_dir,
                    f"c{i}.ring",
                    ring(
                        RingGeometry(512, 1, 1),
                        meta(pid=round_no * 10_000 + i, **claims),
                        [sample(0)],
                        [oom_event(0, "CUDA out of memory")],
                    ),
                )
            time.sleep(12)
            metrics = agent.get("/metrics", 30)[1]
            counts.append(
                sum(
                    line.startswith("oomwatch_framework_oom_total{")
                    for line in metrics.splitlines()
                )
            )
    return {"framework_series_after_round": counts}


def junk(repo: Path, tmp: Path) -> dict[str, Any]:
    """A real trainer's file, then 2,000 junk entries (and 200 ring-named ones) beside it;
    then the trainer records an OOM: how long until the agent has it?"""
    with running_agent(repo, tmp) as agent:
        quiet = ring(RingGeometry(1024, 4, 2), meta(), [sample(0)], [])
        put(agent.probe_dir, "trainer.ring", quiet)
        for i in range(2000):
            (agent.probe_dir / f"junk-{i}").write_bytes(b"")
        for i in range(200):
            (agent.probe_dir / f"junk-{i}.ring").write_bytes(b"x")
        time.sleep(2)
        started = time.monotonic()
        put(
            agent.probe_dir,
            "trainer.ring",
            ring(RingGeometry(1024, 4, 2), meta(), [sample(0)], [oom_event(0)]),
        )
        seen = agent.arrival(lambda line: line.get("kind") == "framework", 20.0)
    return {
        "entries": 2201,
        "trainer_oom_recorded_after_s": round(seen - started, 1) if seen else "never (20 s)",
    }


def device(repo: Path, tmp: Path) -> dict[str, Any]:
    """A character device (1:3, /dev/null) named x.ring: does the agent open it?"""
    from oomwatch.cgroups.inotify import IN_OPEN, Inotify

    with running_agent(repo, tmp) as agent:
        os.mknod(agent.probe_dir / "x.ring", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        watch = Inotify()
        watch.add_watch(agent.probe_dir, IN_OPEN)
        opened = 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            select.select([watch.fileno()], [], [], 0.2)
            opened += sum(e.name == "x.ring" for e in watch.read())
        watch.close()
    return {"device_opens_in_5s": opened}


def idle_connections(repo: Path, tmp: Path) -> dict[str, Any]:
    """600 idle TCP connections to the metrics port: threads, and can Prometheus scrape?"""
    with running_agent(repo, tmp) as agent:
        before = agent.status()["Threads"]
        conns = []
        for _ in range(600):
            conns.append(socket.create_connection(("127.0.0.1", agent.port), timeout=5))
        time.sleep(3)
        at_3s = agent.status()["Threads"]
        started = time.monotonic()
        status, _ = agent.get("/metrics", 10)
        scrape_s = round(time.monotonic() - started, 2)
        time.sleep(27)
        at_30s = agent.status()["Threads"]
        for c in conns:
            c.close()
    ask = "from oomwatch.daemon import config; print(config.DEFAULT_METRICS_ADDRESS)"
    default = subprocess.run(
        [sys.executable, "-c", ask], env=agent_env(repo, None), capture_output=True, text=True
    ).stdout.strip()
    return {
        "threads_before": before,
        "threads_3s": at_3s,
        "threads_30s": at_30s,
        "scrape_status": status,
        "scrape_s": scrape_s,
        "default_address": default,
    }


def bad_database(repo: Path, tmp: Path) -> dict[str, Any]:
    """A corrupt database, then one from a newer schema: does `oomwatch run` come up?"""
    import sqlite3

    out: dict[str, Any] = {}
    for variant in ("corrupt", "newer"):
        sub = tmp / variant
        (sub / "state").mkdir(parents=True)
        db = sub / "state" / "oomwatch.db"
        if variant == "corrupt":
            db.write_bytes(b"SQLite format 3\0" + os.urandom(8192))
        else:
            con = sqlite3.connect(db)
            con.execute(
                "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                " applied_at_s REAL NOT NULL)"
            )
            con.execute("INSERT INTO schema_migrations VALUES (99, 0)")
            con.commit()
            con.close()
        try:
            with running_agent(repo, sub) as agent:
                agent.kill()
                recorded = agent.arrival(lambda line: line.get("event") == "oom_kill", 10)
                aside = sorted(p.name for p in (sub / "state").iterdir())
                out[variant] = {
                    "healthy": True,
                    "kill_recorded": recorded is not None,
                    "state_dir": aside,
                    "log": [
                        line.get("event")
                        for _, line in agent.lines
                        if line.get("event", "").startswith("store")
                    ],
                }
        except RuntimeError as exc:
            out[variant] = {"healthy": False, "error": str(exc)[-300:]}
    return out


def task_table(repo: Path, tmp: Path) -> dict[str, Any]:
    """Three kills with 20,000-row task tables; stored bytes; `report --store --json` RSS."""
    import sqlite3

    with running_agent(repo, tmp) as agent:
        for _ in range(3):
            agent.kill(extra_tasks=20_000)
            time.sleep(6)
    con = sqlite3.connect(tmp / "state" / "oomwatch.db")
    sizes = [r[0] for r in con.execute("SELECT length(data) FROM incidents")]
    con.close()
    report = peak_rss_kib(
        [sys.executable, "-m", "oomwatch.cli", "report", "--store", str(tmp / "state"), "--json"],
        agent_env(repo, None),
        repo,
        120,
        3 << 20,
    )
    db_bytes = (tmp / "state" / "oomwatch.db").stat().st_size
    return {"stored_bytes_per_incident": sizes, "db_bytes": db_bytes, "report_json": report}


def headers(repo: Path, tmp: Path, count: int = 1_000_000) -> dict[str, Any]:
    """1M bare `invoked oom-killer` headers to `oomwatch report` (stopped at 120 s or 3 GiB)."""
    path = tmp / "headers.log"
    line = "bench-hog invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
    with open(path, "w") as fh:
        for i in range(count):
            fh.write(f"[{i // 1000:5d}.{i % 1000:06d}] {line}\n")
    out = peak_rss_kib(
        [sys.executable, "-m", "oomwatch.cli", "report", str(path)],
        agent_env(repo, None),
        repo,
        120,
        3 << 20,
    )
    out["input_mib"] = round(path.stat().st_size / 2**20, 1)
    return out


ATTACKS: dict[str, Callable[[Path, Path], dict[str, Any]]] = {
    "big_files": big_files, "claim_pod": claim_pod, "claim_etcd": claim_etcd, "bomb": bomb,
    "flood": flood, "churn": churn, "junk": junk, "device": device,
    "idle_connections": idle_connections, "bad_database": bad_database,
    "task_table": task_table, "headers": headers,
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--only", default=",".join(ATTACKS))
    args = parser.parse_args()
    repo = args.repo.resolve()
    for name in args.only.split(","):
        tmp = Path(tempfile.mkdtemp(prefix=f"attack-{name}-"))
        started = time.monotonic()
        try:
            result = ATTACKS[name](repo, tmp)
        except Exception as exc:  # one attack's failure is a result, not the end of the run
            result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        result["wall_s"] = round(time.monotonic() - started, 1)
        print(json.dumps({"attack": name, **result}), flush=True)


if __name__ == "__main__":
    main()
