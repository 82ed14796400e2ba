"""The agent helpers: the fake node the in-process agent runs on, and the log-line selector
the real-kernel tests wait with."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from support.agent import victim_is
from support.host import CONTAINER, POD_UID, REPORT, VICTIM, config_for, fake_host


def test_the_fake_host_holds_the_recorded_kills_container_and_a_kernel_log_fifo(
    tmp_path: Path,
) -> None:
    assert POD_UID in CONTAINER and b"Killed process" in REPORT
    container_dir, writer, _ = fake_host(tmp_path)
    try:
        assert container_dir == tmp_path / "cgroup" / CONTAINER.lstrip("/")
        assert (container_dir / "cgroup.procs").read_text() == f"{os.getpid()}\n"
        assert stat.S_ISFIFO((tmp_path / "kmsg.fifo").stat().st_mode)
        config = config_for(tmp_path, node_name="n1")
        assert config.kmsg_path == str(tmp_path / "kmsg.fifo") and config.node_name == "n1"
        assert config.cgroup_roots == (str(tmp_path / "cgroup"),)
    finally:
        os.close(writer)


def test_victim_is_selects_the_kill_line_of_that_pid_only() -> None:
    select = victim_is(VICTIM)
    assert select({"event": "oom_kill", "process.pid": VICTIM})
    assert not select({"event": "oom_kill", "process.pid": VICTIM + 1})
    assert not select({"event": "started", "process.pid": VICTIM})
