"""OOM storms on a real cgroup v2 kernel (the lab VM): the right pod for every kill, or
"ambiguous" -- never a wrong one.  The v2 twins of tests/daemon/test_storm_kernel.py, with
the systemd driver's kubepods.slice tree, smaller and slower (the VM emulates its CPU): on v2
the OOM notification is the `oom` count of `memory.events`, read on inotify."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.agent import DaemonProcess, seed_cursor_at_log_end
from support.storms import Storm, burst, storm

from oomwatch.lab import ScratchMemcg

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


def test_storm_with_a_restart_charges_no_pod_wrongly(
    scratch_v2: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    """20 kills, one every 0.3 s over 5 containers, the report budget spent before every
    round of 5, the agent SIGKILLed after the 12th.  Under emulation the agent's reads lag
    the kernel by up to hundreds of milliseconds (two kills 190 ms apart were both first
    read after the second, 6.12 on a busy host): kills that close may be ambiguous."""
    plan = Storm(pods=5, kills=20, every_s=0.3, driver="systemd", spend=True, min_bare=3,
                 close_s=0.5)  # fmt: skip
    storm(scratch_v2, start_daemon, tmp_path, plan)


def test_simultaneous_burst_puts_no_kill_in_the_wrong_pod(
    scratch_v2: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    """4 containers released by one barrier (within 300 ms under emulation)."""
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    burst(scratch_v2, daemon, tmp_path, pods=4, driver="systemd", within_ms=300.0)
