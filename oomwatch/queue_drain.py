"""Taking what other threads queued, in one go: the hand-off every owner thread does."""

from __future__ import annotations

import queue
from typing import TypeVar

_T = TypeVar("_T")


def drain(items: queue.SimpleQueue[_T]) -> list[_T]:
    """(The taking thread) everything put on `items` so far, oldest first; never blocks.
    What another thread puts meanwhile may be taken now or by the next drain."""
    taken: list[_T] = []
    while True:
        try:
            taken.append(items.get_nowait())
        except queue.Empty:
            return taken
