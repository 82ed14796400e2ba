"""The "bytes, not counts" attacks, run on a checkout's real `oomwatch run` / `oomwatch report`.

    .venv/bin/python bench/hostile.py --repo .              # this tree
    git archive <commit> | tar -x -C /tmp/base
    .venv/bin/python bench/hostile.py --repo /tmp/base      # an older one, same attacks
    .venv/bin/python bench/hostile.py --repo . --only group,utf8

Each attack prints one JSON line of what it measured; bench/RESULTS.md has both runs.  The
inputs are built with this tree's code; the code under test is `--repo`'s (PYTHONPATH).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from support.fifo_agent import agent_env, peak_rss_kib, running_agent  # noqa: E402
from support.kmsg import group_kill  # noqa: E402
from support.store_versions import uncapped_group_kill_store  # noqa: E402


def history(repo: Path, tmp: Path) -> dict[str, Any]:
    """10 kills of a container with 30,000 processes: the agent's RSS growth after the first."""
    with running_agent(repo, tmp) as agent:
        rss: list[int] = []
        for k in range(1, 11):
            agent.kill(extra_tasks=30_000)
            agent.wait_line(
                lambda line, k=k: (
                    line.get("event") == "oom_kill"  # type: ignore[misc]
                    and line.get("process.pid") == 20_000 + k
                ),
                120,
            )
            time.sleep(0.5)
            rss.append(agent.status()["VmRSS"])
        peak = agent.status()["VmHWM"]
    growth_mib = round((rss[-1] - rss[0]) / 1024, 1)
    return {
        "rss_after_kill_mib": [round(r / 1024, 1) for r in rss],
        "growth_mib": growth_mib,
        "peak_mib": round(peak / 1024, 1),
    }


def group(repo: Path, tmp: Path) -> dict[str, Any]:
    """One memory.oom.group kill of 20,000 processes through the /dev/kmsg decoder (the best
    of 5, wall and CPU: the machine is shared)."""
    records = tmp / "group.kmsg"
    records.write_bytes(b"\n".join(group_kill(20_000)))
    code = (
        "import sys,time,json\nfrom oomwatch.decode import decode_kmsg_records\n"
        f"raws=open({str(records)!r},'rb').read().split(b'\\n')\n"
        "walls,cpus=[],[]\n"
        "for _ in range(5):\n"
        " t,c=time.perf_counter(),time.process_time()\n"
        " (i,)=decode_kmsg_records(raws).incidents\n"
        " walls.append(time.perf_counter()-t); cpus.append(time.process_time()-c)\n"
        "from oomwatch.store.limits import bounded\n"
        "print(json.dumps({'decode_s':round(min(walls),3),'decode_cpu_s':round(min(cpus),3),"
        "'decode_s_all':[round(w,3) for w in walls],'victims_held':len(i.victims),"
        "'stored_bytes':len(bounded(i)[1].encode())}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=agent_env(repo, None),
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return dict(json.loads(out.stdout))


def store(repo: Path, tmp: Path) -> dict[str, Any]:
    """`oomwatch report --store` over 20 uncapped 20,000-victim group kills (4.1 MB each)."""
    uncapped_group_kill_store(tmp, 20)
    peaks = {}
    forms: list[tuple[str, list[str]]] = [
        ("text", []),
        ("json", ["--json"]),
        ("json_last_1", ["--json", "--last", "1"]),
        ("html", ["--html", str(tmp / "r.html")]),
    ]
    for name, args in forms:
        command = [sys.executable, "-m", "oomwatch.cli", "report", "--store", str(tmp), *args]
        run = peak_rss_kib(command, agent_env(repo, None), repo, 600, 3 << 20, tmp / "out")
        peaks[name] = {"peak_mib": run["peak_rss_mib"], "s": run["seconds"], "rc": run["rc"]}
    return peaks


def report_on(repo: Path, path: Path) -> dict[str, Any]:
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "oomwatch.cli", "report", str(path)],
        env=agent_env(repo, None),
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return {
        "rc": out.returncode,
        "s": round(time.perf_counter() - started, 2),
        "traceback": "Traceback" in out.stderr,
        "stderr": out.stderr[-160:],
    }


def utf8(repo: Path, tmp: Path) -> dict[str, Any]:
    """A 68 KB gzip of invalid UTF-8 (3 MB of `x\\x80` pairs), and plain text of the size."""
    bad, plain = tmp / "bad.gz", tmp / "plain.gz"
    bad.write_bytes(gzip.compress((b"x\x80" * 100 + b"\n") * 15_000, 9))
    plain.write_bytes(gzip.compress((b"x" * 200 + b"\n") * 15_000, 9))
    return {
        "gzip_bytes": bad.stat().st_size,
        "invalid": report_on(repo, bad),
        "ascii": report_on(repo, plain),
    }


def nested(repo: Path, tmp: Path) -> dict[str, Any]:
    """A 600 KB journal JSON line nested 300,000 deep."""
    path = tmp / "nested.json"
    path.write_text('{"MESSAGE":' + "[" * 300_000 + "]" * 300_000 + "}\n")
    return report_on(repo, path)


def flood(repo: Path, tmp: Path) -> dict[str, Any]:
    """10 pod directories of 20,000 hard links and 1,000 junk files: kill-to-log latency."""
    probe = tmp / "probe"
    probe.mkdir()
    for d in range(10):
        pod = probe / f"1b2c0000-{d:04d}"
        pod.mkdir()
        junk = tmp / f"junk{d}"  # an inode takes 65,000 links at most (ext4)
        junk.write_bytes(b"x")
        for i in range(20_000):
            os.link(junk, pod / f"j{i}")
    for i in range(1_000):
        (probe / f"junk{i}.trainer.ring").write_bytes(b"\0" * 64)
    with running_agent(repo, tmp) as agent:
        time.sleep(3)
        latencies = []
        for k in range(1, 6):
            written = agent.kill()
            logged = agent.arrival(
                lambda line, k=k: (
                    line.get("event") == "oom_kill"  # type: ignore[misc]
                    and line.get("process.pid") == 20_000 + k
                ),
                30,
            )
            latencies.append(None if logged is None else round(logged - written, 3))
            time.sleep(1)
        lines = len(agent.events(lambda line: str(line.get("event", "")).startswith("probe_file")))
    return {"kill_to_log_s": latencies, "refusal_lines": lines}


ATTACKS: dict[str, Callable[[Path, Path], dict[str, Any]]] = {
    "group": group, "utf8": utf8, "nested": nested, "store": store, "history": history,
    "flood": flood,
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", type=Path, default=ROOT)
    parser.add_argument("--only", default=",".join(ATTACKS))
    args = parser.parse_args()
    for name in args.only.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                result = ATTACKS[name](args.repo.resolve(), Path(tmp))
            except Exception as exc:  # an older checkout may fail an attack outright
                result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps({"attack": name, **result}), flush=True)


if __name__ == "__main__":
    main()
