"""Work counted where time would vary: `calls_made(work)`, the Python and builtin calls a
piece of work makes, the same on an idle machine and on a loaded one.  Tests bound the
growth of work with it; the seconds belong to the benches (bench/RESULTS.md)."""

from __future__ import annotations

import cProfile
import pstats
from collections.abc import Callable


def calls_made(work: Callable[[], object]) -> int:
    """The calls `work()` makes, counted by cProfile (its own call included)."""
    profile = cProfile.Profile()
    profile.runcall(work)
    stats = pstats.Stats(profile)
    return int(stats.total_calls)  # type: ignore[attr-defined]  # set by Stats, not typeshed
