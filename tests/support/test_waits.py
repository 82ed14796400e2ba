"""The waits: `until` returns what came or names what did not; `settled` returns a value
once it stops changing, waits out late changes, and fails on one that never settles."""

from __future__ import annotations

import time
from itertools import count

import pytest

from support import settled, until, wait_for


def test_wait_for_and_until_return_what_came() -> None:
    ticks = count()
    assert wait_for(lambda: next(ticks) >= 3, timeout_s=5.0, interval_s=0.001)
    assert until("the third tick", lambda: n if (n := next(ticks)) >= 6 else None, 5.0, 0.001) == 6
    assert not wait_for(lambda: False, timeout_s=0.01, interval_s=0.001)
    with pytest.raises(AssertionError, match="the answer not within"):
        until("the answer", lambda: None, timeout_s=0.01, interval_s=0.001)


def test_settled_waits_out_late_changes() -> None:
    started = time.monotonic()
    # 1, 2, 3 over the first ~30 ms, then 3 for good: the answer is the last value
    answers = iter([1, 1, 2, 2, 3])
    value = settled(
        "the count", lambda: next(answers, 3), quiet_s=0.05, timeout_s=5.0, interval_s=0.01
    )
    assert value == 3
    assert time.monotonic() - started >= 0.05 + 0.03  # the quiet window began at the last change


def test_settled_fails_on_a_value_that_never_settles() -> None:
    ticks = count()
    with pytest.raises(AssertionError, match="the clock still changing"):
        settled("the clock", lambda: next(ticks), quiet_s=0.05, timeout_s=0.2, interval_s=0.01)
