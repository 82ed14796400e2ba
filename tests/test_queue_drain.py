"""`drain` takes what was queued, in order, without blocking on an empty queue."""

from __future__ import annotations

import queue

from oomwatch.queue_drain import drain


def test_drain_takes_everything_queued_in_order_and_then_nothing() -> None:
    items: queue.SimpleQueue[int] = queue.SimpleQueue()
    assert drain(items) == []  # returns at once
    for item in (3, 1, 2):
        items.put(item)
    assert drain(items) == [3, 1, 2]
    assert drain(items) == [] and items.empty()
