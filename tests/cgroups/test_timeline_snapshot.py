"""The timelines the cgroup worker hands the loop: a ring frozen as bytes reads back the very
samples the ring holds; a snapshot copies only rings that changed, and says "none" for a
container asked for that the sampler has no ring of."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oomwatch.cgroups.ring import DecimatedRing, FrozenRing
from oomwatch.cgroups.timeline_snapshot import ASKED_KEEP_S, SnapshotMaker

ROW = (100, 1000, 60, 30, 5, 0, 5, -1)  # usage, limit, anon, file, shmem, thp, kernel, inactive


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.5, 20.0), st.integers(0, 1 << 40)), max_size=300),
    st.sampled_from([(1.0, 600.0, 60.0, 10.0), (1.0, 30.0, 60.0, 10.0), (0.25, 20.0, 5.0, 2.0)]),
)
def test_a_frozen_ring_reads_back_the_rings_samples(
    steps: list[tuple[float, int]], shape: tuple[float, float, float, float]
) -> None:
    """Growing, wrapped, with a coarse past and an open bucket: the same samples, in order."""
    ring = DecimatedRing(*shape)
    t = 1_000.0
    for gap, usage in steps:
        t += gap
        ring.append(t, (usage, *ROW[1:]))
    frozen = ring.frozen()
    assert frozen.samples() == ring.samples()
    assert FrozenRing.of(ring.samples()) == frozen  # and the samples freeze to the same bytes


def test_a_snapshot_copies_a_ring_only_when_it_got_a_sample() -> None:
    ring = DecimatedRing(1.0, 60.0, 60.0, 10.0)
    ring.append(1.0, ROW)
    maker = SnapshotMaker(60.0, 1.0)
    first = maker.refresh([("/a", ring)], now_s=0.0)
    assert maker.refresh([("/a", ring)], now_s=1.0) is first  # nothing new: the same value
    ring.append(2.0, ROW)
    second = maker.refresh([("/a", ring)], now_s=2.0)
    assert second is not first and len(second.windows["/a"].samples()) == 2
    assert len(first.windows["/a"].samples()) == 1  # the earlier value did not change
    timeline = second.freeze("/a", at_s=1.5)  # the window before the kill
    assert timeline is not None and [s.t_seconds for s in timeline.samples] == [1.0]
    assert "/a" not in maker.refresh([], now_s=3.0)  # no longer attended: dropped


def test_a_container_asked_for_without_a_ring_is_answered_empty_for_a_while() -> None:
    maker = SnapshotMaker(60.0, 1.0)
    answered = maker.refresh([], now_s=10.0, asked=["/gone"])
    assert "/gone" in answered and answered.freeze("/gone", 5.0) is None
    assert "/gone" in maker.refresh([], now_s=10.0 + ASKED_KEEP_S - 1)
    assert "/gone" not in maker.refresh([], now_s=10.0 + ASKED_KEEP_S)
