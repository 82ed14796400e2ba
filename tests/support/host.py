"""A fake node for the whole agent in the test process: the kernel log as the relay's FIFO,
a cgroup v2 tree holding the recorded kill's container, and the agent's settings for both.
`REPORT` is that kill as the kernel printed it (tests/daemon/data/memcg_kill.kmsg)."""

from __future__ import annotations

import dataclasses
import io
import os
import re
from pathlib import Path
from typing import Any

from oomwatch.daemon.config import DaemonConfig
from oomwatch.sinks.log import setup_logging
from support.cgroupfs import kubelet_container

DATA = Path(__file__).resolve().parents[1] / "daemon" / "data" / "memcg_kill.kmsg"
REPORT = DATA.read_bytes()
CONTAINER = re.search(rb"task_memcg=([^,]+),", REPORT).group(1).decode()  # type: ignore[union-attr]
POD_UID = re.search(r"/pod([0-9a-f-]{36})/", CONTAINER).group(1)  # type: ignore[union-attr]
VICTIM = int(re.search(rb"Killed process (\d+)", REPORT).group(1))  # type: ignore[union-attr]


def config_for(tmp_path: Path, **changes: Any) -> DaemonConfig:
    """The agent's settings for a fake tree at tmp/cgroup and the kernel log at tmp/kmsg.fifo."""
    config = DaemonConfig(
        node_name="test-node",
        metrics_host="127.0.0.1",
        metrics_port=0,
        state_dir=tmp_path / "state",
        cgroup_roots=(str(tmp_path / "cgroup"),),
        kmsg_path=str(tmp_path / "kmsg.fifo"),
        standalone=True,
        log_format="json",
        probe_dir=None,
        annotate_pods=False,
        sample_interval_s=0.2,
        timeline_window_s=60.0,
        enrich_wait_s=1.0,
        max_incidents=100,
        max_age_days=1.0,
    )
    return dataclasses.replace(config, **changes)


def fake_host(tmp_path: Path) -> tuple[Path, int, io.StringIO]:
    """The tree at tmp/cgroup (its container's dir returned), a writer of the kernel-log
    FIFO (the caller closes it; records written stay queued while no agent reads) and the
    stream the agent logs to."""
    container_dir = kubelet_container(tmp_path / "cgroup", CONTAINER)
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    out = io.StringIO()
    setup_logging("json", stream=out)
    return container_dir, writer, out
