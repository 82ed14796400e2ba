"""`oomwatch run`'s interpreter settings: the GIL handed over within 1 ms and the start-up heap
frozen out of the cyclic GC's reach (run in a child: both are process-wide)."""

from __future__ import annotations

import subprocess
import sys

from oomwatch.daemon.interpreter import SWITCH_INTERVAL_S

CHILD = """
import gc, sys
from oomwatch.daemon.interpreter import tune_interpreter
before = gc.get_freeze_count()
tune_interpreter()
print(sys.getswitchinterval(), before, gc.get_freeze_count())
"""


def test_tuning_sets_the_switch_interval_and_freezes_the_start_up_heap() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    interval, before, frozen = float(out[0]), int(out[1]), int(out[2])
    assert interval == SWITCH_INTERVAL_S
    assert before == 0 and frozen > 1000  # the imports' objects, at least
