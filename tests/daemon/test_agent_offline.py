"""The agent's loop without the kernel: kmsg records through a FIFO (as the split-privilege
DaemonSet's relay writes them) and a cgroup v2 file tree whose counters the test writes."""

from __future__ import annotations

import io
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oomwatch.daemon.agent import Agent
from oomwatch.daemon.config import DaemonConfig
from oomwatch.incident import Incident
from oomwatch.sinks.log import setup_logging
from oomwatch.store import IncidentStore

DATA = Path(__file__).parent / "data" / "memcg_kill.kmsg"
REPORT = DATA.read_bytes()
CONTAINER = re.search(rb"task_memcg=([^,]+),", REPORT).group(1).decode()  # type: ignore[union-attr]
POD_UID = re.search(r"/pod([0-9a-f-]{36})/", CONTAINER).group(1)  # type: ignore[union-attr]
VICTIM = int(re.search(rb"Killed process (\d+)", REPORT).group(1))  # type: ignore[union-attr]


def events(oom_kill: int) -> str:
    return f"low 0\nhigh 0\nmax 0\noom {oom_kill}\noom_kill {oom_kill}\noom_group_kill 0\n"


def make_tree(root: Path) -> Path:
    """A v2 mount with the report's kubelet-like path; the container holds one live process."""
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    parts = [p for p in CONTAINER.split("/") if p]
    path = root
    for depth, part in enumerate(parts, 1):
        path = path / part
        path.mkdir()
        leaf = depth == len(parts)
        (path / "memory.events").write_text(events(0))
        (path / "memory.current").write_text("1048576\n")
        (path / "memory.max").write_text("33554432\n" if leaf else "max\n")
        (path / "memory.stat").write_text("anon 1048576\nfile 0\nshmem 0\n")
        (path / "memory.oom.group").write_text("0\n")
        (path / "cgroup.procs").write_text("4242\n" if leaf else "")
        (path / "cgroup.events").write_text(f"populated {int(leaf)}\nfrozen 0\n")
    return path


@pytest.fixture
def agent_env(tmp_path: Path) -> Iterator[tuple[Agent, Path, int, io.StringIO]]:
    container_dir = make_tree(tmp_path / "cgroup")
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    out = io.StringIO()
    setup_logging("json", stream=out)
    config = DaemonConfig(
        node_name="test-node", metrics_host="127.0.0.1", metrics_port=0,
        state_dir=tmp_path / "state", cgroup_roots=(str(tmp_path / "cgroup"),),
        kmsg_path=str(fifo), standalone=True, log_format="json", probe_dir=None,
        annotate_pods=False, sample_interval_s=0.2, timeline_window_s=60.0,
        enrich_wait_s=1.0, max_incidents=100, max_age_days=1.0,
    )
    agent = Agent(config)
    loop = threading.Thread(target=agent.run, daemon=True)
    loop.start()
    try:
        yield agent, container_dir, writer, out
    finally:
        agent.stop()
        loop.join(10)
        os.close(writer)
        assert not loop.is_alive()


def stored(state_dir: Path) -> list[Incident]:
    reader = IncidentStore.open_readonly(state_dir)
    try:
        return reader.query()
    finally:
        reader.close()


def wait_for(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_fifo_report_and_counters_become_incidents(
    agent_env: tuple[Agent, Path, int, io.StringIO],
) -> None:
    agent, container_dir, writer, out = agent_env
    state_dir = agent.config.state_dir
    time.sleep(0.5)  # a few memory samples
    # chatter a user wrote (facility 1) is skipped, the report decoded
    os.write(writer, b"12,1,5,-;oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/forged\n")
    for line in REPORT.splitlines(keepends=True):
        os.write(writer, line)
    (container_dir / "memory.events").write_text(events(1))
    assert wait_for(lambda: len(stored(state_dir)) == 1, 5.0)
    [kill] = stored(state_dir)
    assert kill.pod_uid == POD_UID and kill.victim is not None and kill.victim.pid == VICTIM
    assert kill.container_survived is True  # pid 4242 is still in the container
    assert kill.limit_scope == "container" and not kill.kmsg_missing
    assert kill.boot_id and kill.node == "test-node" and kill.wall_time
    # a kill the counter saw and the log never reported
    (container_dir / "memory.events").write_text(events(2))
    assert wait_for(lambda: len(stored(state_dir)) == 2, 6.0)
    # the store orders by time, and the fixture's kernel stamp may lie after "now" on a
    # freshly booted machine: pick the counter-only incident by what it is, not by position
    [missing] = [x for x in stored(state_dir) if x.victim is None]
    assert missing.kmsg_missing and missing.pod_uid == POD_UID
    time.sleep(0.5)
    assert len(stored(state_dir)) == 2  # the first kill's counter did not make a second
    lines = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith("{")]
    kills = [x for x in lines if x.get("event") == "oom_kill"]
    assert [x["kmsg_missing"] for x in kills] == [False, True]
    assert kills[0]["victim_pid"] == VICTIM and kills[0]["pod_uid"] == POD_UID
    assert all(x.get("task_memcg") != "/forged" for x in kills)


def test_restart_resumes_after_the_cursor(tmp_path: Path) -> None:
    make_tree(tmp_path / "cgroup")
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    config = DaemonConfig(
        node_name="n", metrics_host="127.0.0.1", metrics_port=0,
        state_dir=tmp_path / "state", cgroup_roots=(str(tmp_path / "cgroup"),),
        kmsg_path=str(fifo), standalone=True, log_format="json", probe_dir=None,
        annotate_pods=False, sample_interval_s=0.2, timeline_window_s=60.0,
        enrich_wait_s=1.0, max_incidents=100, max_age_days=1.0,
    )
    setup_logging("json", stream=io.StringIO())
    for _ in range(2):  # the relay resends the same records to the restarted agent
        writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        agent = Agent(config)
        loop = threading.Thread(target=agent.run, daemon=True)
        loop.start()
        os.write(writer, REPORT)
        assert wait_for(lambda: len(stored(config.state_dir)) == 1, 5.0)
        time.sleep(0.5)
        agent.stop()
        loop.join(10)
        os.close(writer)
        assert agent.pipeline.stats.duplicates == 0  # skipped by the cursor, not deduped
    assert len(stored(config.state_dir)) == 1
