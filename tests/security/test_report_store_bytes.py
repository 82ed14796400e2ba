"""`oomwatch report --store` over a store of 20 group kills of 20,000 victims each (4.1 MB
each, as agents before the victim cap stored them) stays under the agent container's 192 MiB
limit in every format (it took 188 MiB as text, 232 MiB `--json`, 360 MiB `--html`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.fifo_agent import REPO, agent_env, peak_rss_kib
from support.store_versions import uncapped_group_kill_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store")
    uncapped_group_kill_store(path)  # 8 of the 20: the peak is one incident's, in CI time
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
