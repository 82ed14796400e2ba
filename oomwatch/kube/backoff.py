"""Retry waits for the API: exponential, capped, and jittered.

When the API server comes back after an outage, every node's agent is waiting to retry.  With
plain doubling they all failed at the same moment and wait the same times, so a thousand
agents hit the recovering server in one burst at every step.  Each wait is therefore drawn
from the upper half of the current step ("equal jitter": between half the ceiling and the
ceiling), so the retries spread over half a step (15 s at the 30 s cap) while no agent
retries sooner than half of what plain doubling would wait.  Watches get the same treatment
(`watch_timeout_s`): client-go's reflector also draws its watch timeout from [min, 2·min).
"""

from __future__ import annotations

import random


class Backoff:
    """`next_s()` for each failure in a row, `reset()` after a success."""

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self.initial_s = initial_s
        self.max_s = max(max_s, initial_s)
        self._rng = rng or random.Random()
        self._ceiling_s = initial_s

    def next_s(self) -> float:
        """The wait before the next retry, in [ceiling/2, ceiling]; the ceiling doubles."""
        ceiling = self._ceiling_s
        self._ceiling_s = min(ceiling * 2, self.max_s)
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._ceiling_s = self.initial_s

    @property
    def ceiling_s(self) -> float:
        """The longest the next wait can be (what a log line says it waits at most)."""
        return self._ceiling_s


def watch_timeout_s(minimum_s: int, rng: random.Random | None = None) -> int:
    """A watch's server-side timeout in [minimum, 2·minimum): re-watches spread out."""
    return int(minimum_s * (1.0 + (rng or random).random()))
