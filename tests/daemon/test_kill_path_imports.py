"""A kill imports nothing: every module its path needs is loaded before the agent says
`started`.  A module imported lazily (to spare `oomwatch report`'s start-up) would be loaded
by the first kill, inside that kill's latency (`statistics` cost the first kill with a
timeline ~10 ms), and would stay outside the frozen start-up heap.

`python -X importtime` writes a line to stderr at each import; the lines written between
the `started` line and the kill's line are the kill's imports."""

from __future__ import annotations

import sys
from pathlib import Path

from support import until
from support.cgroupfs import kubelet_container
from support.fifo_agent import CONTAINER, REPO, AgentProc, imports_in, running_agent
from support.store import stored

from oomwatch.units import MIB

VICTIM_PID = 20_001  # the first kill's victim (`AgentProc.kill`)


def sampled(agent: AgentProc, usage_bytes: int) -> None:
    """The container uses `usage_bytes` now; returns once /metrics shows it sampled."""
    (agent.container_dir / "memory.current").write_text(f"{usage_bytes}\n")
    series = "oomwatch_container_memory_usage_bytes{"

    def shown() -> bool | None:
        lines = agent.metrics().splitlines()
        return any(
            ln.startswith(series) and float(ln.rsplit(" ", 1)[1]) == usage_bytes for ln in lines
        )

    def why() -> str:
        """What /metrics showed of the series, and the agent's last lines."""
        shown_lines = [ln for ln in agent.metrics().splitlines() if ln.startswith(series)]
        return f"/metrics: {shown_lines}; {agent.why()}"

    until(f"a sample of {usage_bytes} bytes", lambda: shown() or None, 15, why=why)


def test_a_kill_with_a_timeline_loads_no_module(tmp_path: Path) -> None:
    # near its 32 MiB limit from the start: sampled at every interval, not at idle's pace
    container = kubelet_container(tmp_path / "cgroup", CONTAINER)
    (container / "memory.current").write_text(f"{28 * MIB}\n")
    launcher = [sys.executable, "-X", "importtime"]
    with running_agent(REPO, tmp_path, "--sample-interval-s", "0.2", launcher=launcher) as agent:
        for usage_mib in (29, 30, 31):  # a timeline of several samples: the kill sizes from it
            sampled(agent, usage_mib * MIB)
        before = agent.stderr_path.read_text(errors="replace")
        agent.kill(now=True)  # within the timeline's window
        agent.wait_line(
            lambda e: e.get("event") == "oom_kill" and e.get("process.pid") == VICTIM_PID, 15
        )
        after = agent.stderr_path.read_text(errors="replace")
        [incident] = stored(agent.state_dir)  # the line is written after the store
    assert incident.timeline is not None and len(incident.timeline.samples) >= 3
    assert after.startswith(before)
    assert imports_in(after[len(before) :]) == []
