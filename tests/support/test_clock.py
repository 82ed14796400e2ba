"""The fake clock moves only when told, both readings together."""

from __future__ import annotations

from support.clock import FakeClock


def test_advance_moves_the_monotonic_and_wall_readings_together() -> None:
    clock = FakeClock(now=5.0, wall_s=100.0)
    assert (clock(), clock.now, clock.wall()) == (5.0, 5.0, 100.0)
    clock.advance(2.5)
    assert (clock(), clock.wall()) == (7.5, 102.5)


def test_a_ticking_clock_moves_on_with_each_reading() -> None:
    clock = FakeClock(now=5.0, wall_s=100.0, tick_s=0.5)
    assert [clock(), clock(), clock.now] == [5.0, 5.5, 6.0]
    assert clock.wall() == 101.0
