"""The kernel log's clock against CLOCK_MONOTONIC (`reconcile/kernel_time.py`): the offset
from the promptest read, how much later than that one the recent records were read (a starved
agent), and every fact handed over as one frozen `KernelTime`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomwatch.reconcile.kernel_time import RECENT_S, KernelClock, KernelTime


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
    clock.note(110.0, 10.3)  # 300 ms late
    clock.note(120.0, 20.001)
    clock.note(121.0, 21.001)
    assert clock.late_s(21.5) == pytest.approx(0.299)
    clock.note(200.0, 100.001)
    assert clock.late_s(100.5) == pytest.approx(0.0)  # the late read is RECENT_S old
    assert RECENT_S < 100.5 - 10.3


@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 0.5), st.floats(0.0, 90.0))))
def test_lateness_is_the_plain_definition_over_the_last_minute(
    reads: list[tuple[float, float, float]],
) -> None:
    """(gap to the next stamp, read delay, wait before asking): the sliding minimum gives
    what a scan of every read of the last RECENT_S gives."""
    clock = KernelClock()
    seen: list[tuple[float, float]] = []
    stamp = arrival = 0.0
    for gap, delay, wait in reads:
        stamp += gap
        arrival = max(arrival, stamp + delay)
        clock.note(100.0 + stamp, arrival)
        seen.append((arrival, 100.0 + stamp - arrival))
        now = arrival + wait
        best = clock.offset_s()
        window = [d for a, d in seen if a >= now - RECENT_S]
        plain = max(0.0, best - min(window)) if best is not None and window else 0.0
        assert clock.late_s(now) == pytest.approx(plain)


def test_the_clock_derives_every_fact_as_one_value_as_of_one_time() -> None:
    clock = KernelClock()
    assert clock.time(0.0, None) == KernelTime(None, 0.0, None)  # nothing known yet
    clock.seed(99.9)  # an earlier run of this boot left its estimate
    assert clock.time(0.0, 5.0) == KernelTime(99.9, 0.0, 5.0)
    for stamp, delay in ((110.0, 0.001), (111.0, 0.005), (112.0, 0.250)):
        clock.note(stamp, stamp - 100.0 + delay)
    time = clock.time(12.3, 12.0)
    assert time.offset_s == pytest.approx(99.999) and time.late_s == pytest.approx(0.249)
    assert time.read_through_s == 12.0
    assert clock.time(12.3 + RECENT_S + 1.0, None).late_s == 0.0  # the late read is forgotten
    with pytest.raises(AttributeError):
        time.offset_s = 0.0  # type: ignore[misc]


@given(
    st.lists(
        st.tuples(st.floats(0.0, 5.0), st.lists(st.floats(0.0, 0.3), min_size=1, max_size=6)),
        min_size=1,
        max_size=12,
    )
)
def test_a_read_noted_by_its_extremes_tells_what_each_record_noted_tells(
    reads: list[tuple[float, list[float]]],
) -> None:
    """(wait before the read, each record's age when read): `note_read` with the read's
    earliest and latest stamps leaves the same offset and lateness as a note per record,
    in any order of stamps within the read."""
    each, extremes = KernelClock(), KernelClock()
    arrival_s = 100.0
    for wait_s, ages_s in reads:
        arrival_s += wait_s
        stamps_s = [arrival_s + 50.0 - age_s for age_s in ages_s]
        for stamp_s in stamps_s:
            each.note(stamp_s, arrival_s)
        extremes.note_read(min(stamps_s), max(stamps_s), arrival_s)
        assert extremes.offset_s() == each.offset_s()
        assert extremes.late_s(arrival_s) == each.late_s(arrival_s)
