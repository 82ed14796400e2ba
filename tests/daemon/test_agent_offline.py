"""The agent's loop without the kernel: kmsg records through a FIFO (as the split-privilege
DaemonSet's relay writes them) and a cgroup v2 file tree whose counters the test writes."""

from __future__ import annotations

import io
import json
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support import settled, until, wait_for
from support.agent import agent_thread
from support.cgroupfs import kubelet_container, memory_events
from support.host import CONTAINER, POD_UID, REPORT, VICTIM, config_for, fake_host
from support.store import stored

from oomwatch.daemon import agent as agent_module
from oomwatch.daemon.agent import Agent
from oomwatch.daemon.config import parse_address
from oomwatch.decode import ReportAssembler
from oomwatch.decode.records import LogRecord
from oomwatch.incident import Incident
from oomwatch.sinks.log import get_logger, setup_logging
from oomwatch.sources.kernel_log import KernelLog
from oomwatch.store import IncidentStore


@pytest.fixture
def agent_env(tmp_path: Path) -> Iterator[tuple[Agent, Path, int, io.StringIO]]:
    container_dir, writer, out = fake_host(tmp_path)
    try:
        with agent_thread(config_for(tmp_path)) as agent:
            yield agent, container_dir, writer, out
    finally:
        os.close(writer)


def test_fifo_report_and_counters_become_incidents(
    agent_env: tuple[Agent, Path, int, io.StringIO],
) -> None:
    agent, container_dir, writer, out = agent_env
    state_dir = agent.config.state_dir
    until(
        "a memory sample of the container",
        lambda: agent.cgroups.view.limits_bytes.get(CONTAINER),
        30.0,
        interval_s=0.05,
    )
    # chatter a user wrote (facility 1) is skipped, the report decoded
    os.write(writer, b"12,1,5,-;oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/forged\n")
    for line in REPORT.splitlines(keepends=True):
        os.write(writer, line)
    (container_dir / "memory.events").write_text(memory_events(1, 1))
    assert wait_for(lambda: len(stored(state_dir)) == 1, 30.0)
    [kill] = stored(state_dir)
    assert kill.pod_uid == POD_UID and kill.victim is not None and kill.victim.pid == VICTIM
    assert kill.container_survived is True  # this test's process is still in the container
    assert kill.limit_scope == "container" and not kill.kmsg_missing
    assert kill.boot_id and kill.node == "test-node" and kill.wall_time
    # a kill the counter saw and the log never reported
    (container_dir / "memory.events").write_text(memory_events(2, 2))
    assert wait_for(lambda: len(stored(state_dir)) == 2, 30.0)
    # the store orders by time, and the fixture's kernel stamp may lie after "now" on a
    # freshly booted machine: pick the counter-only incident by what it is, not by position
    [missing] = [x for x in stored(state_dir) if x.victim is None]
    assert missing.kmsg_missing and missing.pod_uid == POD_UID
    # the first kill's counter did not make a second
    assert settled("the stored incidents", lambda: len(stored(state_dir)), 0.5, 10.0) == 2
    lines = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith("{")]
    kills = [x for x in lines if x.get("event") == "oom_kill"]
    assert [x["kmsg_missing"] for x in kills] == [False, True]
    assert kills[0]["process.pid"] == VICTIM and kills[0]["k8s.pod.uid"] == POD_UID
    assert all(x.get("task_memcg") != "/forged" for x in kills)


def test_restart_resumes_after_the_cursor(tmp_path: Path) -> None:
    kubelet_container(tmp_path / "cgroup", CONTAINER)
    fifo = tmp_path / "kmsg.fifo"
    os.mkfifo(fifo)
    config = config_for(tmp_path)
    setup_logging("json", stream=io.StringIO())
    for _ in range(2):  # the relay resends the same records to the restarted agent
        writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        with agent_thread(config) as agent:
            os.write(writer, REPORT)
            assert wait_for(lambda: len(stored(config.state_dir)) == 1, 5.0)
            # what more it would store if it stored the resent records twice
            assert settled("the store", lambda: len(stored(config.state_dir)), 0.5, 10.0) == 1
        os.close(writer)
        assert agent.pipeline.stats.duplicates == 0  # skipped by the cursor, not deduped
    assert len(stored(config.state_dir)) == 1


def killed_line(seq: int, pid: int, comm: str) -> bytes:
    """A header-less kill as the kernel prints it once its report rate limit is spent."""
    usec = int(time.monotonic() * 1e6)
    return (
        f"3,{seq},{usec},-;Memory cgroup out of memory: Killed process {pid} ({comm})"
        " total-vm:114996kB, anon-rss:39168kB, file-rss:6644kB, shmem-rss:0kB, UID:0"
        " pgtables:136kB oom_score_adj:0\n"
    ).encode()


def test_kills_counted_while_the_agent_was_down_are_recorded_after_a_restart(
    tmp_path: Path,
) -> None:
    """Two kills while stopped: one whose header-less line waits in the log, one whose
    record is gone.  The restarted agent (same boot) compares the counters with its
    checkpoint: the bare kill gets the container's cgroup, the other is kmsg_missing."""
    container_dir, writer, _ = fake_host(tmp_path)
    config = config_for(tmp_path)
    try:
        with agent_thread(config) as agent:
            os.write(writer, REPORT)
            (container_dir / "memory.events").write_text(memory_events(1, 1))
            assert wait_for(lambda: len(stored(config.state_dir)) == 1, 5.0)

            def checkpointed() -> bool:
                saved = agent.store.load_checkpoint(agent.boot_id or "")
                return saved is not None and saved.counters[CONTAINER].oom_kill == 1

            assert wait_for(checkpointed, 5.0)
        (container_dir / "memory.events").write_text(memory_events(3, 3))  # while no agent runs
        os.write(writer, killed_line(39177, 9400, "bench-hog"))
        with agent_thread(config) as agent:
            assert wait_for(lambda: len(stored(config.state_dir)) == 3, 6.0)
            # nothing more may come: a duplicate would be counted by then
            assert settled("the store", lambda: len(stored(config.state_dir)), 0.5, 10.0) == 3
            assert agent.pipeline.stats.duplicates == 0
    finally:
        os.close(writer)
    kills = stored(config.state_dir)
    assert len(kills) == 3 and all(k.pod_uid == POD_UID for k in kills)
    [bare] = [k for k in kills if k.header_suppressed]
    assert bare.victim is not None and bare.victim.pid == 9400 and bare.task_memcg == CONTAINER
    [missing] = [k for k in kills if k.kmsg_missing]
    assert missing.task_memcg == CONTAINER and missing.wall_time is not None


class ChokingAssembler(ReportAssembler):
    """The decoder failing on one record (no real record found that makes it raise)."""

    def feed(self, record: LogRecord) -> list[Incident]:
        if "choke" in record.message:
            raise RuntimeError("decoder bug")
        return super().feed(record)


def test_a_record_the_decoder_chokes_on_is_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    out = io.StringIO()
    setup_logging("json", stream=out)
    kmsg = KernelLog(str(tmp_path / "absent"), None, "b", get_logger(), on_lost=lambda n: None)
    kmsg.assembler = ChokingAssembler()
    lines = REPORT.splitlines(keepends=True)
    # a record that holds a key (`oom`), so that the decode feeds it (chatter is skipped unfed)
    bad = b"4,39100,7872270700,-;oom choke \x1b[2J here\n"
    records = [(39097 + i, raw) for i, raw in enumerate(lines[:3])]
    records += [(39100, bad)] + [(39100 + i, raw) for i, raw in enumerate(lines[3:], 1)]
    incidents = kmsg.decode(records) + kmsg.flush()
    [kill] = incidents
    assert kill.victim is not None and kill.victim.pid == VICTIM and kill.task_memcg == CONTAINER
    logged = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith("{")]
    [error] = [x for x in logged if x["event"] == "kmsg_record_undecodable"]
    assert error["seq"] == 39100 and "RuntimeError: decoder bug" in error["error"]
    assert "\x1b" not in error["record"] and "choke" in error["record"]
    assert kmsg.undecodable == 1


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback (::1) on this machine")
def test_metrics_bind_an_ipv6_address(tmp_path: Path) -> None:
    _, writer, out = fake_host(tmp_path)
    os.close(writer)
    host, port = parse_address("[::1]:0")
    with agent_thread(config_for(tmp_path, metrics_host=host, metrics_port=port)) as agent:
        assert wait_for(lambda: agent.metrics_address is not None, 5.0)
        assert agent.metrics_address is not None
        bound = agent.metrics_address[1]
        with urllib.request.urlopen(f"http://[::1]:{bound}/healthz", timeout=5) as reply:
            assert reply.status == 200
    started = [json.loads(x) for x in out.getvalue().splitlines() if '"started"' in x]
    assert started[0]["metrics_address"] == f"[::1]:{bound}"


def test_age_retention_runs_on_a_quiet_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only at startup or every 100 adds: a node that records nothing still prunes."""
    monkeypatch.setattr(agent_module, "PRUNE_INTERVAL_S", 0.3)
    _, writer, _ = fake_host(tmp_path)
    os.close(writer)
    config = config_for(tmp_path, max_age_days=1.0)
    with agent_thread(config) as agent:
        three_days_ago = datetime.now(UTC) - timedelta(days=3)
        old = Incident(
            kind="eviction",
            boot_id="b",
            pod_uid="u",
            wall_time=three_days_ago.isoformat(),
            detected_at=three_days_ago.isoformat(),
        )
        store = IncidentStore(config.state_dir)
        try:
            assert store.add(old) and store.count() == 1
        finally:
            store.close()
        assert wait_for(lambda: agent.store.count() == 0, 3.0)
