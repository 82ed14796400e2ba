"""A CUDA OOM recorded by the probe reaches the daemon: one `framework` incident, stored once,
counted in `oomwatch_framework_oom_total`.  Standalone, nothing vouches for the pod the file
claims (oomwatch.probe.identity): the claim is kept as text, the series has no pod labels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .agent import REPO, running_agent

pytestmark = pytest.mark.slow

# torch's CPU build still has torch.OutOfMemoryError; raising it with CUDA's message text is
# what the probe sees on a GPU.  Pod identity as the downward API would give it.
WORKLOAD = """
import torch, oomwatch.probe
probe = oomwatch.probe.start()
probe.set_phase("grand_scoring", epoch=0, step=3, batch_size=4096)
raise torch.OutOfMemoryError(
    "CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total capacity of 79.15 GiB of "
    "which 2.10 GiB is free. Including non-PyTorch memory, this process has 77.03 GiB memory in "
    "use. Of the allocated memory 52.40 GiB is allocated by PyTorch, and 23.91 GiB is reserved "
    "by PyTorch but unallocated.")
"""
POD_UID = "5f0c2a9e-1d7b-4c1e-9a53-6b1f0e2d7c44"


def test_framework_oom_through_the_daemon(memcg_v1: None, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    with running_agent(tmp_path) as agent:
        env = {
            "OOMWATCH_PROBE_DIR": str(agent.probe_dir),
            "OOMWATCH_POD_UID": POD_UID,
            "OOMWATCH_POD_NAME": "trainer-0",
            "OOMWATCH_POD_NAMESPACE": "ml",
            "OOMWATCH_CONTAINER_NAME": "trainer",
            "PATH": "/usr/bin:/bin",
        }
        run = subprocess.run(
            [sys.executable, "-c", WORKLOAD],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 1 and "OutOfMemoryError" in run.stderr  # it still dies
        found = agent.wait_for(
            lambda i: (
                i.kind == "framework"
                and (i.allocator or {}).get("claimed", {}).get("pod_uid") == POD_UID
            )
        )
        metrics = agent.metrics()
    assert len(found) == 1
    incident = found[0]
    assert incident.pod_uid is None and incident.k8s is None
    alloc = incident.allocator
    assert alloc is not None and alloc["phase"] == "grand_scoring"
    assert alloc["claimed"]["container"] == "trainer" and alloc["identity"] == "unverified"
    assert alloc["requested_bytes"] == 6 << 30
    assert alloc["reserved_unallocated_bytes"] == round(23.91 * (1 << 30))
    series = [
        line for line in metrics.splitlines() if line.startswith("oomwatch_framework_oom_total{")
    ]
    assert len(series) == 1 and 'framework="torch-cuda"' in series[0]
    assert 'pod_uid=""' in series[0] and 'namespace=""' in series[0]
    assert series[0].endswith(" 1.0")
