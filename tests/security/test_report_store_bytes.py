"""`oomwatch report --store` over a store of 20 group kills of 20,000 victims each (4.1 MB
each, as agents before the victim cap stored them) stays under the agent container's 192 MiB
limit in every format (it took 188 MiB as text, 232 MiB `--json`, 360 MiB `--html`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.fifo_agent import REPO, agent_env, peak_rss_kib

from oomwatch.incident import Incident, TaskRow, Victim
from oomwatch.store import IncidentStore

pytestmark = pytest.mark.slow


def old_store(path: Path, incidents: int = 8) -> None:
    """`incidents` such kills (the peak is one incident's: 8 of the issue's 20 show it here,
    in CI time; bench/hostile.py stores 20)."""
    store = IncidentStore(path)
    for k in range(incidents):
        victims = [Victim(pid=100 + i, comm=f"w{i}", anon_rss_bytes=i << 12, uid=1000)
                   for i in range(20_000)]  # fmt: skip
        tasks = [TaskRow(pid=100 + i, name=f"w{i}", uid=1000, rss_pages=i) for i in range(300)]
        incident = Incident(kind="memcg", boot_id="b", kernel_time_s=float(k), group_kill=True,
                            kills_counted=20_001, victims=victims, tasks=tasks,
                            wall_time=f"2026-11-26T10:00:{k:02d}+00:00")  # fmt: skip
        assert store.add(incident)
        raw = json.dumps(incident.to_dict())  # uncapped, as an agent before the victim cap wrote it
        store._db.execute("UPDATE incidents SET data = ? WHERE id = (SELECT MAX(id) FROM"
                          " incidents)", (raw,))  # fmt: skip
    store.close()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store")
    old_store(path)
    return path


@pytest.mark.parametrize("form", [[], ["--json"], ["--html", "h"]])
def test_report_over_a_store_of_huge_group_kills_fits_the_agents_limit(
    store_dir: Path, tmp_path: Path, form: list[str]
) -> None:
    args = [a if a != "h" else str(tmp_path / "r.html") for a in form]
    command = [sys.executable, "-m", "oomwatch.cli", "report", "--store", str(store_dir), *args]
    run = peak_rss_kib(command, agent_env(REPO, None), REPO, 300, 1 << 20, tmp_path / "out")
    assert run["rc"] == 0 and not run["stopped"], run
    assert float(run["peak_rss_mib"]) < 150, run
    print(f"report {' '.join(form) or 'text'}: peak {run['peak_rss_mib']} MiB")
