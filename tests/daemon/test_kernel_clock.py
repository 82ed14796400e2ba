"""The kernel log's clock against CLOCK_MONOTONIC: the offset from the promptest read, and
how much later than that one the recent records were read (a starved agent)."""

from __future__ import annotations

import pytest

from oomwatch.daemon.kernel_log import RECENT_S, KernelClock


def test_the_offset_is_the_promptest_reads_and_lateness_is_the_spread_since() -> None:
    clock = KernelClock()
    # kernel stamps run 100 s ahead; reads come 1 ms, 5 ms and 250 ms after the stamp
    for stamp, delay in ((110.0, 0.001), (111.0, 0.005), (112.0, 0.250)):
        clock.note(stamp, stamp - 100.0 + delay)
    assert clock.offset_s() == pytest.approx(99.999)
    assert clock.late_s(12.3) == pytest.approx(0.249)


def test_lateness_forgets_old_reads_and_is_zero_before_the_offset_is_known() -> None:
    clock = KernelClock()
    assert clock.late_s(0.0) == 0.0
    clock.note(110.0, 10.3)  # 300 ms late, long ago
    clock.note(200.0, 100.001)
    clock.note(201.0, 101.001)
    assert clock.late_s(101.5) == pytest.approx(0.0)  # the late read is RECENT_S old
    assert clock.late_s(10.3 + RECENT_S) == pytest.approx(0.299)
