"""The one fake clock: a monotonic reading the test advances (`clock()` or `clock.now`), and
a wall-clock reading that moves with it (`clock.wall()`).  With `tick_s` each monotonic
reading also moves it on by that much: time that stands for work done (a deadline of N
ticks is N looks at the clock), the same whatever the machine's load."""

from __future__ import annotations


class FakeClock:
    """Starts at `now` seconds (monotonic) and `wall_s` (wall); `advance` moves both."""

    def __init__(
        self, now: float = 1000.0, wall_s: float = 1_800_000_000.0, tick_s: float = 0.0
    ) -> None:
        self.now = now
        self.wall_s = wall_s
        self.tick_s = tick_s

    def __call__(self) -> float:
        now = self.now
        if self.tick_s:
            self.advance(self.tick_s)
        return now

    def wall(self) -> float:
        return self.wall_s

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall_s += seconds
