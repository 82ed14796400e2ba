"""`oomwatch report` memory stays bounded on any input, measured by its VmHWM.

The attacks: 1M bare `invoked oom-killer` headers, and three 20,000-row task tables read
by `report --store --json`.  The tests run a fifth of the million (`bench/attacks.py --only
headers` runs all of it and times it; bench/RESULTS.md has both).  Each run here is stopped
at 300 s or 1 GiB: not stopped is part of passing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.fifo_agent import REPO, agent_env, peak_rss_kib

from oomwatch.incident import Incident, TaskRow, Victim
from oomwatch.store import IncidentStore

pytestmark = pytest.mark.slow

HEADER = "bench-hog invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"


def headers(path: Path, count: int) -> Path:
    with open(path, "w") as fh:
        for i in range(count):
            fh.write(f"[{i // 1000:5d}.{i % 1000:06d}] {HEADER}\n")
    return path


def report(*args: str, stdout: Path | None = None) -> dict[str, object]:
    command = [sys.executable, "-m", "oomwatch.cli", "report", *args]
    return peak_rss_kib(command, agent_env(REPO, None), REPO, 300, 1 << 20, stdout)


def test_200k_headers_text_report_holds_the_newest_thousand(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    run = report(str(headers(tmp_path / "h.log", 200_000)), stdout=out)
    assert run["rc"] == 0 and not run["stopped"], run
    assert float(run["peak_rss_mib"]) < 100, run  # type: ignore[arg-type]  # measured 61.5
    text = out.read_text()
    assert text.startswith("1000 OOM incidents in")
    assert "holds the newest 1000 of 200000 incidents" in text


def test_json_streams_every_incident_in_bounded_memory(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    run = report("--json", str(headers(tmp_path / "h.log", 100_000)), stdout=out)
    assert run["rc"] == 0 and not run["stopped"], run
    assert float(run["peak_rss_mib"]) < 100, run  # type: ignore[arg-type]
    verdicts = 0
    with open(out) as fh:  # ~180 MB of JSON: counted, not loaded
        for line in fh:
            verdicts += line.startswith('      "verdict": ')
    assert verdicts == 100_000


def test_store_task_tables_are_capped_and_the_json_report_streams(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path)
    for k in range(3):
        tasks = [
            TaskRow(pid=1000 + i, name=f"worker-{i}", uid=1000, rss_pages=i % 977)
            for i in range(20_000)
        ]
        store.add(
            Incident(
                kind="memcg",
                boot_id="b",
                kernel_time_s=float(k),
                tasks=tasks,
                victims=[Victim(pid=1000 + 7, comm="worker-7")],
            )
        )
    sizes = [len(r[0]) for r in store._db.execute("SELECT data FROM incidents")]
    store.close()
    assert max(sizes) < 64 * 1024, sizes  # 256 rows kept
    run = report("--store", str(tmp_path), "--json", stdout=tmp_path / "out.json")
    assert run["rc"] == 0 and float(run["peak_rss_mib"]) < 80, run  # type: ignore[arg-type]
