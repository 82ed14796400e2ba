"""The interpreter's settings for a prompt kernel-log loop: the GIL hand-over and the cyclic GC.

Two threads run Python: the loop and the cgroup worker, whose counter pass runs at the very
moment of a kill (the OOM notification wakes both).  A thread that wakes while the other
runs Python waits for the GIL up to the switch interval, 5 ms by default: the size of the
single-stage spikes measured on the report path (bench/RESULTS.md, issue 26).  A collection
of the cyclic GC runs in whichever thread allocates when it is due, a full one over every
object of the process; the start-up heap (imports, configuration, the first scan) is moved
out of its reach, and automatic collections wait while a kill is on its way through the loop.
"""

from __future__ import annotations

import gc
import sys
from typing import Protocol

SWITCH_INTERVAL_S = 0.001  # the longest the loop waits for the GIL once woken (was 5 ms)
COLLECTION_PAUSE_MAX_S = 1.0  # automatic GC is never held off longer than this at a stretch


def tune_interpreter() -> None:
    """(Once, after start-up, in the agent's process) the GIL handed over within
    `SWITCH_INTERVAL_S`; the start-up heap collected once, then frozen: later
    collections, young and full, no longer walk it."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    gc.collect()
    gc.freeze()


class Collector(Protocol):
    """The part of the `gc` module the pause uses (tests pass a fake)."""

    def isenabled(self) -> bool: ...
    def enable(self) -> None: ...
    def disable(self) -> None: ...


class CollectionPause:
    """Automatic collections held off while the loop handles what woke it and while a kill
    is on its way (OOM news came, or a report is open), for at most `COLLECTION_PAUSE_MAX_S`
    at a stretch; the garbage of that moment is collected right after, when the first
    allocation finds it due.  A pause that hit the limit is not taken again until the loop
    has been idle once, so a log that keeps a report open cannot keep the collector off."""

    def __init__(self, collector: Collector = gc) -> None:
        self._collector = collector
        self._since_s: float | None = None  # paused at this time (CLOCK_MONOTONIC)
        self._spent = False  # the last pause hit the limit while still busy

    @property
    def paused(self) -> bool:
        return self._since_s is not None

    def hold(self, busy: bool, now_s: float) -> None:
        """(Each loop turn) pause or resume automatic collection for the loop's state now."""
        if self._since_s is not None:
            if busy and now_s - self._since_s < COLLECTION_PAUSE_MAX_S:
                return
            self._collector.enable()
            self._since_s = None
            self._spent = busy
        elif busy and not self._spent and self._collector.isenabled():
            self._collector.disable()
            self._since_s = now_s
        elif not busy:
            self._spent = False

    def release(self) -> None:
        """Resume automatic collection (the loop ends)."""
        if self._since_s is not None:
            self._collector.enable()
            self._since_s = None
