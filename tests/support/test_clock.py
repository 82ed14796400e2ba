"""The fake clock moves only when told, both readings together."""

from __future__ import annotations

from support.clock import FakeClock


def test_advance_moves_the_monotonic_and_wall_readings_together() -> None:
    clock = FakeClock(now=5.0, wall_s=100.0)
    assert (clock(), clock.now, clock.wall()) == (5.0, 5.0, 100.0)
    clock.advance(2.5)
    assert (clock(), clock.wall()) == (7.5, 102.5)
