"""The one fake clock: a monotonic reading the test advances (`clock()` or `clock.now`), and
a wall-clock reading that moves with it (`clock.wall()`)."""

from __future__ import annotations


class FakeClock:
    """Starts at `now` seconds (monotonic) and `wall_s` (wall); `advance` moves both."""

    def __init__(self, now: float = 1000.0, wall_s: float = 1_800_000_000.0) -> None:
        self.now = now
        self.wall_s = wall_s

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_s

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall_s += seconds
