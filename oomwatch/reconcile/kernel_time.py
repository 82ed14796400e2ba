"""The kernel log's clock as the reconciliation needs it: one module for every timing fact.

`KernelClock` takes the raw readings the kernel log's reader passes (each live record's stamp
and when it was read; an earlier run's estimate) and derives, purely, the frozen `KernelTime`
value handed to `reconcile()` each loop turn (`KernelClock.time`).  A new timing fact is a
field of `KernelTime` and its derivation here; the reader's only part is passing readings.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = [
    "CLOCK_WINDOW_S",
    "MIN_LIVE_READS",
    "RECENT_READS",
    "RECENT_S",
    "KernelClock",
    "KernelTime",
]

CLOCK_WINDOW_S = 600.0
MIN_LIVE_READS = 3
RECENT_S = 60.0  # `KernelClock.late_s` looks this far back ...
RECENT_READS = 4096  # ... keeping at most this many of them


@dataclass(frozen=True, slots=True)
class KernelTime:
    """The kernel log's clock as its reader knows it at one loop turn (`KernelClock.time`).

    `offset_s`: the log's stamps minus CLOCK_MONOTONIC (None: not known yet, so no kill is
    placed by its time; 0.0, the default, where stamps are already monotonic, as in tests);
    `late_s`: how much later than the promptest one its records were read lately
    (`KernelClock.late_s`), which widens the attribution's tolerance; `read_through_s`: the
    log held nothing unread at this monotonic time (None: read through now).
    """

    offset_s: float | None = 0.0
    late_s: float = 0.0
    read_through_s: float | None = None


class KernelClock:
    """The kernel log's clock minus CLOCK_MONOTONIC, from the records as they arrive.

    kmsg stamps come from `local_clock()` (sched_clock), which NTP does not slew; the
    monotonic clock is slewed, so the two drift apart slowly (tens of ppm: seconds after
    weeks of uptime).  A record is read after it was stamped, so `stamp - arrival` is at most
    the offset, and the promptest record comes closest: the estimate is the largest such
    difference over the last `CLOCK_WINDOW_S` (a sliding maximum) of records read live
    (backlog replayed at startup is old and says nothing).  Unknown (None) until records of
    `MIN_LIVE_READS` reads came in (one late read alone could be off by its delay), unless
    an earlier run of this boot left its estimate (`seed`).  Memory is bounded: the sliding
    windows keep at most one entry per read of their span, `_latest` at most `RECENT_READS`.
    """

    def __init__(self, window_s: float = CLOCK_WINDOW_S) -> None:
        self._window_s = window_s
        self._best: deque[tuple[float, float]] = deque()  # (arrival, difference), decreasing
        # (arrival, difference), increasing differences: the front is the latest read of
        # the last RECENT_S (a sliding minimum, as `_best` is a sliding maximum)
        self._latest: deque[tuple[float, float]] = deque()
        self._seed: float | None = None
        self._reads: set[float] = set()  # arrival times of the first live reads

    def seed(self, offset_s: float) -> None:
        self._seed = offset_s

    def note(self, kernel_time_s: float, arrival_mono_s: float) -> None:
        """A record stamped `kernel_time_s` was read live at `arrival_mono_s`."""
        if len(self._reads) < MIN_LIVE_READS:
            self._reads.add(arrival_mono_s)
        difference = kernel_time_s - arrival_mono_s
        while self._best and self._best[-1][1] <= difference:
            self._best.pop()
        self._best.append((arrival_mono_s, difference))
        while self._best[0][0] < arrival_mono_s - self._window_s:
            self._best.popleft()
        latest = self._latest
        while latest and latest[-1][1] >= difference:
            latest.pop()
        latest.append((arrival_mono_s, difference))
        while len(latest) > RECENT_READS or latest[0][0] < arrival_mono_s - RECENT_S:
            latest.popleft()

    def note_read(self, earliest_s: float, latest_s: float, arrival_mono_s: float) -> None:
        """The records of one read, stamped `earliest_s` .. `latest_s`, arrived together at
        `arrival_mono_s`: as `note` for each, since at one arrival only the extremes can
        change the estimate (the latest its maximum, the earliest the lateness), and a
        report's 80 records are then two notes, not 80, in the kill's path."""
        self.note(earliest_s, arrival_mono_s)
        if latest_s != earliest_s:
            self.note(latest_s, arrival_mono_s)

    def late_s(self, now_s: float) -> float:
        """How much later than the promptest one the records of the last `RECENT_S` were
        read: a measure of how starved the agent is.  The offset is only as good as its
        promptest read, whose own delay is unknown; on a starved CPU (lab VM, 6.12, a busy
        host) it was late by more than the attribution's 50 ms, a kill's time came out
        after its own counter rise, and the rise was ruled out: the kill went to the wrong
        pod.  The attribution widens its tolerance by this much."""
        best = self.offset_s()
        if best is None:
            return 0.0
        for arrival, difference in self._latest:  # the first in the window is its latest
            if arrival >= now_s - RECENT_S:
                return max(0.0, best - difference)
        return 0.0

    def offset_s(self) -> float | None:
        if len(self._reads) < MIN_LIVE_READS or not self._best:
            return self._seed
        return self._best[0][1]

    def time(self, now_s: float, read_through_s: float | None) -> KernelTime:
        """Every timing fact as of `now_s` (CLOCK_MONOTONIC), one frozen value; the reader
        says how far it has read the log (`read_through_s`, None: through now)."""
        return KernelTime(self.offset_s(), self.late_s(now_s), read_through_s)
