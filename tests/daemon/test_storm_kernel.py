"""OOM storms on the real kernel: the right pod for every kill, or "ambiguous" -- never a wrong one.

The kernel prints at most 10 full reports per 5 s node-wide; later kills print a bare
`Killed process` line with no cgroup.  Every hog here is a `python3` in a container of the
same limit, so the name, size and uid of a victim tell nothing: only the kernel's timing
(counters, OOM notifications) and pids seen in a cgroup can place it.  Each test asserts, per
kill: stored exactly once; a pod UID only if it is the victim's own; when ambiguous, no pod
and a candidate list that holds the true one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.agent import DaemonProcess, seed_cursor_at_log_end
from support.storms import (
    Storm,
    burst,
    storm,
)

from oomwatch.lab import (
    ScratchMemcg,
)

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


def test_storm_of_sixty_kills_with_a_restart_charges_no_pod_wrongly(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    """60 real kills in about 12 s round-robin over 10 containers (48 MiB each), the agent
    SIGKILLed after the 30th and restarted while the storm goes on."""
    storm(scratch, start_daemon, tmp_path, Storm(pods=10, kills=60, every_s=0.2))


def test_simultaneous_burst_of_eight_puts_no_kill_in_the_wrong_pod(
    scratch: ScratchMemcg, start_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    """8 containers whose hogs prefill to just under their limit, then are released by one
    barrier: their OOMs fall within the same 100 ms, after the rate limit is spent, so the
    kills are header-less.  The counters read every 2 ms while an OOM is on and the pids
    seen at the notification separate them; where they cannot (kills a few milliseconds
    apart while the agent is starved of CPU), the kill is ambiguous.  On a loaded machine
    the hogs may not all be released together: such a round still must not be wrong, and
    is repeated (at most four rounds) until the kills fall within 100 ms, most header-less."""
    seed_cursor_at_log_end(tmp_path / "state")
    daemon = start_daemon()
    burst(scratch, daemon, tmp_path, pods=8)
