"""Fixtures for the daemon's real-kernel tests: scratch memcgs and an `oomwatch run` process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lab_fixtures import memcg_v1, scratch
from support import free_port, wait_for
from support.agent import AgentProcess
from support.store import stored

from oomwatch.sources.kmsg import KmsgCursor, read_backlog, read_boot_id, record_seq
from oomwatch.store import IncidentStore

REPO = Path(__file__).resolve().parents[2]


def seed_cursor_at_log_end(state_dir: Path) -> None:
    """Start the daemon after everything already in the ring (other engineers' kills)."""
    last = None
    for raw in read_backlog():
        last = record_seq(raw) if record_seq(raw) is not None else last
    store = IncidentStore(state_dir)
    try:
        if last is not None:
            store.save_cursor(KmsgCursor(read_boot_id(), last))
    finally:
        store.close()


class DaemonProcess(AgentProcess):
    """`oomwatch run` over this machine's cgroups and kernel log (support.agent)."""

    def __init__(self, state_dir: Path, *extra: str, kubeconfig: Path | None = None) -> None:
        super().__init__(
            ["--cgroup-root", "/sys/fs/cgroup", *extra], state_dir=state_dir, kubeconfig=kubeconfig
        )


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """Start `oomwatch run` processes on one temp state dir; all are stopped afterwards."""
    started: list[DaemonProcess] = []

    def start(*extra: str) -> DaemonProcess:
        daemon = DaemonProcess(tmp_path / "state", *extra)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()


__all__ = [
    "DaemonProcess",
    "free_port",
    "memcg_v1",
    "scratch",
    "seed_cursor_at_log_end",
    "stored",
    "wait_for",
]


def victim_is(pid: int) -> Callable[[dict[str, object]], bool]:
    """Selects the `oom_kill` log line whose victim is `pid`."""
    return lambda line: line.get("event") == "oom_kill" and line.get("process.pid") == pid
