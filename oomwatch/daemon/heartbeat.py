"""The loop's heartbeat for `/healthz`: how long the loop has gone without a turn, not
counting the time its thread waited for a CPU.

A loop that is stuck (blocked forever, or spinning) must fail the liveness probe; a loop
that is only starved of CPU (a saturated node, the agent's small CPU weight) is not stuck,
and a restart would not help it.  The kernel counts each thread's run-queue wait
(`/proc/<pid>/task/<tid>/schedstat`, second field, ns): time waiting there is taken off the
staleness.  Where the file cannot be read, wall time alone counts, as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

RunDelay = Callable[[int], float | None]  # a thread's run-queue wait so far (s), by its tid
REREAD_S = 1.0  # a beat rereads the wait at most this often (a file read; the loop turns often)


def run_delay_s(tid: int) -> float | None:
    """Seconds the thread `tid` of this process has waited on a run queue (None: unknown)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat", "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True, slots=True)
class Beat:
    """One turn of the loop: when (monotonic), on which thread, and that thread's run-queue
    wait as last read (None: unknown)."""

    at_s: float
    tid: int
    delay_s: float | None


class Heartbeat:
    """Beaten by the loop's thread at each turn; read by the health thread, which sees one
    `Beat` value, replaced whole."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, run_delay: RunDelay = run_delay_s
    ) -> None:
        self._clock = clock
        self._run_delay = run_delay
        self._beat = Beat(clock(), threading.get_native_id(), None)
        self._read_at_s = float("-inf")  # (loop thread) when the wait was last read

    def beat(self) -> None:
        """(Loop thread) a turn is done."""
        now = self._clock()
        tid = threading.get_native_id()
        delay_s = self._beat.delay_s
        if now - self._read_at_s >= REREAD_S:
            delay_s = self._run_delay(tid)
            self._read_at_s = now
        self._beat = Beat(now, tid, delay_s)

    def stale_s(self) -> float:
        """Seconds since the last beat that the loop's thread had a CPU or was blocked
        (its run-queue wait since the wait was last read taken off)."""
        beat = self._beat
        wall_s = self._clock() - beat.at_s
        before = beat.delay_s
        now = self._run_delay(beat.tid) if before is not None else None
        if before is None or now is None:
            return wall_s
        return wall_s - max(0.0, now - before)
