"""When the cgroup worker's sample pass waits for the loop to finish a kill.

A sample pass is pure Python for 0.2-5 ms (the attended containers, the forecast, the
gauges).  At a kill it is usually due at once: the kill's news makes its container attended,
and on v1 the usage threshold fires as the usage falls back.  Run then, it holds the GIL in
the middle of the loop's decode, diagnosis and store of that kill, whose p99 the agent
promises.  Nothing in it is urgent: the kill's memory window is the snapshot taken before
its news, and the forecast and the gauges are 1 Hz figures.  So from the batch that brings
a kill's news until the loop asks for the counter pass it asks for once the kill line is
handled (`CgroupWorker.request_pass`), a sample owed waits, never longer than
`HOLD_MAX_S` from when it fell due: an OOM without a kill line, a group kill's open report,
a loop that never asks, or a storm of kills cannot stop the sampling.  Counter passes never
wait: they date the rises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOLD_MAX_S = 0.25  # the longest a sample owed waits for the loop (a group kill: 0.1 s open)


@dataclass(slots=True)
class SampleHold:
    """(Worker thread) the hold, on CLOCK_MONOTONIC seconds."""

    until_s: float = 0.0  # a kill is in the loop's hands until then (0: none)
    owed_since_s: float | None = None  # a sample fell due then and has not run

    def kill_news(self, now_s: float) -> None:
        """A batch with a kill's news (an OOM notification, a kill counted) is queued."""
        self.until_s = now_s + HOLD_MAX_S

    def kill_handled(self) -> None:
        """The loop asked for the pass a handled kill line brings: nothing waits now."""
        self.until_s = 0.0

    def sample_now(self, due: bool, now_s: float) -> bool:
        """Whether to run the sample pass now; `due`: it fell due in this wake-up.  A sample
        owed is remembered until it runs."""
        if due and self.owed_since_s is None:
            self.owed_since_s = now_s
        if self.owed_since_s is None:
            return False
        if now_s < self.until_s and now_s < self.owed_since_s + HOLD_MAX_S:
            return False
        self.owed_since_s = None
        return True

    def wake_by_s(self) -> float:
        """When a held sample must run at the latest (infinity: none is held)."""
        if self.owed_since_s is None:
            return math.inf
        return min(self.until_s, self.owed_since_s + HOLD_MAX_S)
