"""`oomwatch run` as a subprocess for the end-to-end probe tests (support.agent), and
reading its results."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from support.agent import REPO, AgentProcess
from support.store import wait_stored

from oomwatch.incident import Incident

__all__ = ["REPO", "Agent", "running_agent"]


class Agent(AgentProcess):
    """A standalone agent over this machine's v1 memory cgroups with a probe directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.probe_dir = tmp_path / "probe"
        self.probe_dir.mkdir()
        super().__init__(
            ["--probe-dir", str(self.probe_dir), "--cgroup-root", "/sys/fs/cgroup/memory"],
            state_dir=tmp_path / "state",
            ready="healthy",
        )

    def wait_for(self, wanted: Callable[[Incident], bool], timeout_s: float = 30) -> list[Incident]:
        """The stored incidents that `wanted` accepts, once there is one (or [] at timeout)."""
        return wait_stored(self.state_dir, wanted, timeout_s)


@contextmanager
def running_agent(tmp_path: Path) -> Iterator[Agent]:
    """A standalone agent with a probe directory, healthy before the block runs."""
    with Agent(tmp_path) as agent:
        yield agent
