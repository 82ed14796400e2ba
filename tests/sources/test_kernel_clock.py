"""The kernel log hands the reconciliation its clock as one value (`KernelLog.time`); the
clock's own derivations are tested with their module (tests/reconcile/test_kernel_time.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.reconcile import KernelTime
from oomwatch.sinks.log import get_logger
from oomwatch.sources.kernel_log import KernelLog


def test_the_kernel_log_hands_its_clock_over_as_one_value(tmp_path: Path) -> None:
    """The reconciliation gets offset, lateness and read-through together, as of one time."""
    kmsg = KernelLog(str(tmp_path / "absent"), None, "b", get_logger(), on_lost=lambda _n: None)
    assert kmsg.take(read=True).time == KernelTime(None, 0.0, None)  # nothing known yet
    kmsg.clock.seed(99.9)  # an earlier run of this boot left its estimate
    for stamp, delay in ((110.0, 0.001), (111.0, 0.005), (112.0, 0.250)):
        kmsg.clock.note(stamp, stamp - 100.0 + delay)
    kmsg.read_through_s = 12.0
    time = kmsg.time(12.3)
    assert time.offset_s == pytest.approx(99.999) and time.late_s == pytest.approx(0.249)
    assert time.read_through_s == 12.0
    with pytest.raises(AttributeError):
        time.offset_s = 0.0  # type: ignore[misc]
