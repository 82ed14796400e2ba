"""Helpers every test area shares: a free port, waiting for a condition (one behaviour at
timeout), reading the agent's store.  Importable as `support` (tests/ is on the path)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.01) -> bool:
    """Poll `check` until it holds or the time is up; at the timeout, its last answer (so a
    caller asserts on it and a condition that became true at the last moment still counts)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()
