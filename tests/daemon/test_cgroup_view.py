"""The cgroups as the loop sees them: one value the worker publishes, whose looks at a
cgroup read the hierarchy's files (a fake v2 tree here) and nothing the worker owns."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support import until
from support.cgroup_view import FakeCgroupView
from support.cgroupfs import CONTAINER, CONTAINER2, MIB, POD, CgroupV2Tree

from oomwatch.cgroups import CgroupWatcher
from oomwatch.cgroups.counters import OomCounters
from oomwatch.cgroups.discovery import Hierarchy, WatchedCgroup
from oomwatch.cgroups.oom_events import Sighting
from oomwatch.cgroups.ring import DecimatedRing
from oomwatch.cgroups.timeline import TimelineSampler
from oomwatch.daemon.cgroup_view import CgroupBatch, CgroupView, CounterLevels
from oomwatch.daemon.cgroup_worker import CgroupWorker, attentive_sampler
from oomwatch.incident import Incident, Timeline, TimelineSample
from oomwatch.reconcile import CgroupFacts
from oomwatch.sinks.log import get_logger


def _worker(
    fake_v2: CgroupV2Tree,
    sampler: TimelineSampler | None = None,
    wake: Callable[[], None] = lambda: None,
) -> CgroupWorker:
    """A worker over the fake tree (not started), samples every second."""
    return CgroupWorker(
        lambda: CgroupWatcher([str(fake_v2.root)], poll_interval_s=1.0),
        attentive_sampler(1.0, 60.0) if sampler is None else sampler,
        on_samples=lambda samples, now, view: None,
        wake=wake,
        log=get_logger(),
    )


def test_the_view_reads_oom_group_and_survivors_from_the_hierarchy(fake_v2: CgroupV2Tree) -> None:
    view = CgroupView(hierarchies=(Hierarchy(str(fake_v2.root), 2),))
    (fake_v2.path(POD) / "memory.oom.group").write_text("1\n")
    assert view.oom_group(POD) is True and view.oom_group(CONTAINER) is False
    assert view.oom_group(f"{POD}/gone") is None and view.oom_group("/../etc") is None
    me = os.getpid()  # a live process that is not exiting
    (fake_v2.path(CONTAINER) / "cgroup.procs").write_text(f"{me}\n")
    assert view.survived(CONTAINER, frozenset()) is True
    assert view.survived(CONTAINER, frozenset({me})) is False  # only the victim was there
    assert view.survived(f"{POD}/gone", frozenset()) is None
    # the kill's own cgroup has oom.group set: the members' lines may follow
    assert view.may_kill_group(Incident(kind="memcg", task_memcg=CONTAINER, oom_memcg=POD))
    other = Incident(kind="memcg", task_memcg=CONTAINER2, oom_memcg=CONTAINER2)
    assert not view.may_kill_group(other)  # its own limit; the group is set above it
    assert view.cgroup_v2 and view.may_kill_group(Incident(kind="memcg"))  # header withheld


def test_a_v1_view_says_no_group_kill_follows_without_a_look_at_the_hierarchy() -> None:
    """v1 has no memory.oom.group: a kill line there is complete at once, and the loop,
    which asks at every kill line, does not look at the hierarchy."""

    class NoLooks(CgroupView):
        def oom_group(self, relpath: str) -> bool | None:
            raise AssertionError(f"looked at {relpath}")

    view = NoLooks(hierarchies=(Hierarchy("/sys/fs/cgroup/memory", 1),))
    killed = Incident(kind="memcg", task_memcg=CONTAINER, oom_memcg=POD)
    assert not view.cgroup_v2 and not view.may_kill_group(killed)
    assert not view.may_kill_group(Incident(kind="memcg"))


def test_the_default_view_knows_no_cgroup_and_is_a_value() -> None:
    view = CgroupView()
    assert view.oom_group(CONTAINER) is None and view.survived(CONTAINER, frozenset()) is None
    assert view.timeline(CONTAINER, 0.0) is None and view.facts == CgroupFacts()
    assert not view.cgroup_v2 and not view.may_kill_group(Incident(kind="memcg"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.watched = frozenset({CONTAINER})  # type: ignore[misc]


def test_a_fake_view_answers_from_the_tests_callables() -> None:
    view = FakeCgroupView(
        freeze=lambda rel, at_s: Timeline(peak_bytes=int(at_s)),
        oom_group_for=lambda rel: rel == CONTAINER,
        survived_for=lambda rel, victims: not victims,
    )
    assert view.timeline(CONTAINER, 7.0) == Timeline(peak_bytes=7)
    assert view.oom_group(CONTAINER) is True and view.oom_group(POD) is False
    assert view.survived(CONTAINER, frozenset()) is True
    assert view.survived(CONTAINER, frozenset({1})) is False


def test_the_worker_publishes_limits_and_the_watched_set_with_its_news(
    fake_v2: CgroupV2Tree,
) -> None:
    worker = _worker(fake_v2)
    news, first = worker.take_news()
    assert news is None and {CONTAINER, CONTAINER2} <= first.watched
    assert first.limits_bytes == {} and first.cgroup_v2  # nothing sampled yet
    worker.start()
    try:
        until("the first sampled limits", lambda: worker.take_news()[1].limits_bytes or None, 10.0)
        _, view = worker.take_news()
        assert view.limits_bytes[CONTAINER] == 256 * MIB
        assert view.limits_bytes[CONTAINER2] == 128 * MIB
        assert CONTAINER in view.watched and view.facts.limits_bytes == view.limits_bytes
        assert first.limits_bytes == {}  # the earlier value did not change under its reader
        # calm containers' rings are not copied into the view: it says their window is due
        assert view.timeline(CONTAINER, time.time()) is None and view.timeline_due(CONTAINER)
    finally:
        worker.stop()  # closes what it made


class _OwnedSampler(TimelineSampler):
    """A sampler that notes the thread of every call into it."""

    def __init__(self) -> None:
        super().__init__(1.0, 60.0)
        self.callers: set[str] = set()

    def sample(self, *args: Any, **kwargs: Any) -> list[tuple[WatchedCgroup, TimelineSample]]:
        self.callers.add(threading.current_thread().name)
        return super().sample(*args, **kwargs)

    def attended(self, now_s: float) -> Iterator[tuple[str, DecimatedRing]]:
        self.callers.add(threading.current_thread().name)
        return super().attended(now_s)

    def freeze(self, relpath: str, at_s: float) -> Timeline | None:
        self.callers.add(threading.current_thread().name)
        return super().freeze(relpath, at_s)

    def close(self) -> None:
        """Kept open past the worker's stop, for the test's own look (`really_close`)."""

    def really_close(self) -> None:
        super().close()


def test_a_kills_window_comes_in_the_view_its_news_brings_and_the_loop_never_reads_the_sampler(
    fake_v2: CgroupV2Tree,
) -> None:
    """The kill news of a calm container makes the worker snapshot its window before it
    queues the batch; the view taken with the news freezes the same points the sampler
    itself gives, and only the worker's thread ever called the sampler."""
    sampler = _OwnedSampler()
    worker = _worker(fake_v2, sampler=sampler)
    worker.start()
    try:
        until("the first sample", lambda: worker.take_news()[1].limits_bytes or None, 10.0)
        assert worker.view.timeline_due(CONTAINER)
        fake_v2.events(CONTAINER, oom=1, oom_kill=1)
        news, view = until(
            "the kill news", lambda: n if (n := worker.take_news())[0] else None, 10.0
        )
        assert news is not None and [k.cgroup for k in news.kills] == [CONTAINER]
        at_s = time.time()
        timeline = view.timeline(CONTAINER, at_s)
        assert timeline is not None and not view.timeline_due(CONTAINER)
    finally:
        worker.stop()
    assert sampler.callers == {"oomwatch-cgroups"}
    assert timeline == sampler.freeze(CONTAINER, at_s)  # the same points (the worker stopped)
    sampler.really_close()


def test_a_window_asked_for_comes_in_a_later_view_and_an_unsampled_one_says_so(
    fake_v2: CgroupV2Tree,
) -> None:
    """No kill news needed: the loop asks (a message), the worker snapshots on its thread
    and wakes the loop; a container it has no ring of comes as known-empty, not awaited."""
    woken: list[None] = []
    worker = _worker(fake_v2, wake=lambda: woken.append(None))
    worker.start()
    try:
        until("the first sample", lambda: worker.take_news()[1].limits_bytes or None, 10.0)
        view = worker.take_news()[1]
        assert view.timeline_due(CONTAINER2)
        view.request_timeline(CONTAINER2)
        view.request_timeline(POD)  # watched, but not a container the sampler keeps
        answered = until(
            "the answer",
            lambda: v if not (v := worker.take_news()[1]).timeline_due(POD) else None,
            10.0,
        )
        assert woken and not answered.timeline_due(CONTAINER2)
        assert answered.timeline(CONTAINER2, time.time()) is not None
        assert answered.timeline(POD, time.time()) is None
    finally:
        worker.stop()


def test_counter_levels_come_as_the_last_batch_of_a_take_and_at_stop(fake_v2: CgroupV2Tree) -> None:
    """The loop never reads the worker's counters: asked for, the levels are queued after a
    counter pass, and the take that reaches them stops there; the views carry them while
    they explain exactly the batches taken; stopping queues the final ones."""
    woken: list[None] = []
    worker = _worker(fake_v2, wake=lambda: woken.append(None))
    worker.start()
    try:
        worker.request_levels()
        view = until(
            "the counter levels asked for",
            lambda: v if (v := worker.take_news()[1]).levels is not None else None,
            10.0,
            interval_s=0.01,
        )
        assert view.levels is not None and view.levels.batches == worker.batches_taken
        assert view.levels.counters.keys() >= {CONTAINER, CONTAINER2}
        first = view.levels
    finally:
        worker.stop()
    _, last = worker.take_news()
    assert last.levels is not None and last.levels.batches == worker.batches_taken
    assert last.levels.batches > first.batches  # the final ones, after what was taken
    worker.request_levels()  # after stop: nothing to poke, nothing queued
    assert worker.take_news()[1].levels == last.levels  # still true: no batch since


def test_a_take_stops_at_the_levels_and_a_later_batch_makes_them_stale(
    fake_v2: CgroupV2Tree,
) -> None:
    woken: list[None] = []
    worker = _worker(
        fake_v2, wake=lambda: woken.append(None)
    )  # not started: the test queues as its thread would
    try:
        levels = CounterLevels({CONTAINER: OomCounters(1, 1, 0)}, 1)
        worker.deltas.put(CgroupBatch([], [], [], None, levels))
        worker.deltas.put(CgroupBatch([], [], [Sighting(7, CONTAINER, 1.0)], None))
        news, view = worker.take_news()
        assert news is None and view.levels == levels and worker.batches_taken == 1
        assert woken, "the batch after the levels is taken on the next turn, at once"
        news, view = worker.take_news()
        assert news is not None and [s.pid for s in news.sightings] == [7]
        assert view.levels is None  # a batch came after them: they no longer explain it
    finally:
        worker.stop()
