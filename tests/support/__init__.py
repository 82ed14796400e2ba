"""Helpers every test area shares: a free port and waiting on what can be observed instead of
sleeping (`wait_for` answers whether a condition came, `until` returns what came or fails,
`settled` returns a value once it stops changing).  `support.agent` starts the agent,
`support.store` reads its store.  Importable as `support` (tests/ is on the path)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


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


def until(
    what: str,
    probe: Callable[[], _T | None],
    timeout_s: float,
    interval_s: float = 0.1,
    why: Callable[[], str] | None = None,
) -> _T:
    """Poll `probe` until it returns something other than None, and return that; at the
    timeout fail the test naming `what` never happened (and `why()`, e.g. the logs)."""
    deadline = time.monotonic() + timeout_s
    while (value := probe()) is None:
        if time.monotonic() > deadline:
            detail = f"\n{why()}" if why is not None else ""
            raise AssertionError(f"{what} not within {timeout_s:.0f} s{detail}")
        time.sleep(interval_s)
    return value


def settled(
    what: str,
    probe: Callable[[], _T],
    quiet_s: float,
    timeout_s: float,
    interval_s: float = 0.1,
) -> _T:
    """`probe`'s answer once it has stayed the same for `quiet_s`: what it observes (a store,
    a log) has gone idle.  A late arrival restarts the quiet window, so a loaded machine
    waits longer instead of asserting too early; at the timeout fail naming `what`."""
    start = time.monotonic()
    value = probe()
    since = start
    while True:
        now = time.monotonic()
        if now - since >= quiet_s:
            return value
        if now - start > timeout_s:
            raise AssertionError(f"{what} still changing after {timeout_s:.0f} s: {value!r}")
        time.sleep(interval_s)
        latest = probe()
        if latest != value:
            value, since = latest, time.monotonic()
