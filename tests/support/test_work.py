"""`calls_made` counts what a piece of work does, not how long it takes."""

from __future__ import annotations

from support.work import calls_made


def each(n: int) -> None:
    for i in range(n):
        abs(i)


def test_calls_grow_with_the_work_and_repeat_exactly() -> None:
    small, large = calls_made(lambda: each(100)), calls_made(lambda: each(400))
    assert large - small == 300  # one `abs` a step: the rest is the same in both
    assert calls_made(lambda: each(400)) == large  # the same work, the same count
