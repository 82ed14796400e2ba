"""The cgroup worker's sample pass waits while the loop handles a kill, and never long."""

from __future__ import annotations

import math

from oomwatch.daemon.sample_hold import HOLD_MAX_S, SampleHold


def test_without_a_kill_a_sample_due_runs_at_once_and_nothing_is_owed() -> None:
    hold = SampleHold()
    assert hold.sample_now(True, 10.0)
    assert not hold.sample_now(False, 10.001)
    assert hold.wake_by_s() == math.inf


def test_a_sample_due_during_a_kill_waits_for_the_loops_pass_then_runs() -> None:
    hold = SampleHold()
    hold.kill_news(10.0)
    assert not hold.sample_now(True, 10.002)  # the kill's threshold fired: held
    assert not hold.sample_now(False, 10.004)  # a close-watch pass: still held
    assert hold.wake_by_s() == 10.0 + HOLD_MAX_S
    hold.kill_handled()  # the loop asked for the pass after the kill line
    assert hold.sample_now(False, 10.006)  # owed, so it runs now without falling due again
    assert not hold.sample_now(False, 10.008)


def test_a_loop_that_never_asks_holds_a_sample_no_longer_than_the_bound() -> None:
    hold = SampleHold()
    hold.kill_news(10.0)
    assert not hold.sample_now(True, 10.01)
    assert not hold.sample_now(False, 10.0 + HOLD_MAX_S - 0.001)
    assert hold.sample_now(False, 10.0 + HOLD_MAX_S)


def test_a_storm_of_kill_news_cannot_hold_a_sample_longer_than_the_bound() -> None:
    hold = SampleHold()
    hold.kill_news(10.0)
    assert not hold.sample_now(True, 10.0)
    now = 10.0
    while now < 10.0 + HOLD_MAX_S - 0.01:
        now += 0.01
        hold.kill_news(now)  # a new kill's news at every pass
        assert not hold.sample_now(False, now)
    assert hold.wake_by_s() == 10.0 + HOLD_MAX_S
    assert hold.sample_now(False, 10.0 + HOLD_MAX_S)
