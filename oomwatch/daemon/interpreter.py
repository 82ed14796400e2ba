"""The interpreter's settings for a prompt kernel-log loop: the GIL hand-over and the cyclic GC.

Two threads run Python: the loop and the cgroup worker, whose counter pass runs at the very
moment of a kill (the OOM notification wakes both), and whose sample pass over a dense node
runs pure Python for 10-30 ms.  A thread that wakes while the other runs Python waits for
the GIL up to the switch interval, 5 ms by default.  A collection of the cyclic GC runs in
whichever thread allocates when it is due, a full one over every object of the process; the
start-up heap (imports, configuration, the first scan) is moved out of its reach, which
makes a full collection cost about 0.3 ms instead of 16-64 ms (bench/RESULTS.md, "full-report
latency p99 in every run").
"""

from __future__ import annotations

import gc
import sys

SWITCH_INTERVAL_S = (
    0.001  # the longest the loop waits for the GIL once woken (Python's default: 5 ms)
)


def tune_interpreter() -> None:
    """(Once, after start-up, in the agent's process) the GIL handed over within
    `SWITCH_INTERVAL_S`; the start-up heap collected once, then frozen: later
    collections, young and full, no longer walk it."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    gc.collect()
    gc.freeze()
