"""`oomwatch demo` on the real kernel: it records and prints one kill on whichever cgroup
version holds the memory controller, and says which."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.agent import REPO

from oomwatch.incident import Incident

pytestmark = pytest.mark.kernel


def test_oomwatch_demo_records_and_prints_a_real_kill(cgroup_version: int) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "oomwatch.cli", "demo", "--json", "--limit-mb", "32"],
        capture_output=True,
        timeout=300,  # an emulated CPU (the lab VM) takes minutes
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 0, stderr[-3000:]
    assert f"cgroup v{cgroup_version}" in stderr  # it says which hierarchy it used
    incident = Incident.from_dict(json.loads(result.stdout))
    assert incident.kind == "memcg" and incident.victim is not None
    assert incident.victim.comm == "demo-hog" and incident.limit_scope == "container"
    assert incident.pod_uid and incident.container_id and incident.boot_id
    assert incident.memcg is not None and incident.memcg.limit_bytes == 32 << 20
    assert incident.timeline is not None and incident.timeline.samples  # it saw the growth
