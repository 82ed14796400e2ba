"""Cgroup counters and memory sampling on their own thread, off the kernel log's loop.

Reading hundreds of cgroup files takes 10-30 ms a second on a busy node; done on the loop
that reads /dev/kmsg, a kill arriving meanwhile would wait for it.  `CgroupWorker` is what
the loop holds: it makes the `CgroupThread` (oomwatch.daemon.cgroup_thread: the
`CgroupWatcher` from the factory it is given, the `TimelineSampler`, the forecast) and hands
it to the thread it starts, keeping nothing that leads to it; both sides share only the
`CgroupChannel`.  The loop receives counter increases through a queue (and a wake-up) with
the `CgroupView` published last (limits, watched set, the timelines of the containers in
trouble as a snapshot), the forecast's changes since its last take, and, when asked for
them (`request_levels()`), the counter levels; it asks for an early rescan with
`request_rescan()`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import replace

from oomwatch.cgroups import CgroupWatcher, TimelineSampler
from oomwatch.cgroups.attention import COLD_INTERVAL_S, UsageThresholds
from oomwatch.cgroups.oom_events import OomSignal, Sighting
from oomwatch.daemon.cgroup_channel import CgroupChannel
from oomwatch.daemon.cgroup_thread import CgroupThread, OnSamples
from oomwatch.daemon.cgroup_view import CgroupBatch, CgroupView, CounterLevels
from oomwatch.daemon.forecast_news import ForecastNews
from oomwatch.queue_drain import drain
from oomwatch.reconcile import CgroupNews, CounterKills
from oomwatch.stages import EventLogger

__all__ = ["CgroupWorker", "OnSamples", "attentive_sampler"]


def attentive_sampler(interval_s: float, window_s: float) -> TimelineSampler:
    """The agent's sampler: every `interval_s` for containers that need attention, one per
    `COLD_INTERVAL_S` for the others, v1 usage thresholds where the kernel takes them."""
    cold_s = max(interval_s, COLD_INTERVAL_S)
    return TimelineSampler(
        interval_s, window_s, cold_interval_s=cold_s, thresholds=UsageThresholds()
    )


class CgroupWorker:
    """The loop's side of the cgroup worker: the news it takes, the requests it sends."""

    def __init__(
        self,
        watcher: Callable[[], CgroupWatcher],
        sampler: TimelineSampler,
        *,
        on_samples: OnSamples,
        wake: Callable[[], None],
        log: EventLogger,
        forecast_horizon_s: float | None = None,
    ) -> None:
        """`watcher` makes the watcher the worker owns; `sampler` is the worker's from now
        on; `forecast_horizon_s`: how far ahead the forecast warns (None: no forecast)."""
        self._channel = CgroupChannel(wake)
        # Until start() hands it to its thread, the only holder: a worker never started
        # closes it at stop().
        self._unstarted: CgroupThread | None = CgroupThread(
            watcher(),
            sampler,
            self._channel,
            on_samples=on_samples,
            log=log,
            forecast_horizon_s=forecast_horizon_s,
        )
        self._thread: threading.Thread | None = None
        self._forecast_takes = 0  # takes that carried forecast changes
        self._levels: CounterLevels | None = None  # taken, still true
        self.batches_taken = 0  # batches taken by the loop

    def start(self) -> None:
        """Start the thread and hand it the `CgroupThread` through a queue it empties: from
        then on only that thread's own frame holds it."""
        owner, self._unstarted = self._unstarted, None
        if owner is None:
            return
        handoff: queue.SimpleQueue[CgroupThread] = queue.SimpleQueue()
        handoff.put(owner)
        del owner
        self._thread = threading.Thread(
            target=_run_handed, args=(handoff,), name="oomwatch-cgroups", daemon=True
        )
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def liveness(self) -> Callable[[], bool]:
        """(Any thread) whether the worker's thread runs, without a path to this object."""
        thread = self._thread
        return (lambda: False) if thread is None else thread.is_alive

    @property
    def deltas(self) -> queue.SimpleQueue[CgroupBatch]:
        """The batches queued and not taken yet."""
        return self._channel.batches

    def request_rescan(self) -> None:
        """Look for new cgroups now (a kill named one we do not watch yet)."""
        self._channel.rescan.set()
        self._channel.poke()

    @property
    def view(self) -> CgroupView:
        """The snapshot published last (any thread: a value)."""
        return self._channel.view

    def take_news(self) -> tuple[CgroupNews | None, CgroupView]:
        """(Loop thread) everything queued since the last look, as one piece of news, with
        the view published last (at least as new as the news) carrying the forecast's
        changes since the last take.  The take stops at a batch of counter levels: the
        views carry them from then on, for as long as they explain every batch taken."""
        channel = self._channel
        kills: list[CounterKills] = []
        signals: list[OomSignal] = []
        sightings: list[Sighting] = []
        counted_at_s: float | None = None
        taken = False
        levels: CounterLevels | None = None
        while not channel.batches.empty():
            batch = channel.batches.get_nowait()
            self.batches_taken += 1
            if batch.levels is not None:
                levels = batch.levels
                if not channel.batches.empty():
                    channel.wake()  # the rest on the next turn, right after this one
                break
            taken = True
            signals += batch.signals
            sightings += batch.sightings
            if batch.started_at_s is not None:
                counted_at_s = max(counted_at_s or batch.started_at_s, batch.started_at_s)
            kills += [
                CounterKills(
                    d.cgroup.relpath, d.oom_kill, d.observed_at_s, d.oom_group_kill, d.since_s
                )
                for d in batch.deltas
                if not d.vanished and d.oom_kill > 0
            ]
        news = CgroupNews(kills, signals, sightings, counted_at_s) if taken else None
        view = channel.view  # read after the queue: published before what was taken
        changes = [change for taken_changes in drain(channel.forecasts) for change in taken_changes]
        if changes:
            self._forecast_takes += 1
            view = replace(view, forecast=ForecastNews(self._forecast_takes, tuple(changes)))
        if levels is not None or taken:
            self._levels = levels
        return news, view if self._levels is None else replace(view, levels=self._levels)

    def request_pass(self) -> None:
        """Read the counters now (a kill line with no cgroup arrived: its counter has moved);
        the batch that follows says when the pass began, even if it found nothing."""
        self._channel.force.set()
        self._channel.loop_turned.set()  # a pass held for the loop waits no longer
        self._channel.poke()

    def take_oom_begun(self) -> bool:
        """(Loop thread) whether the worker woke the loop for an OOM's report since the
        last take (`cgroup_channel.REPORT_FIRST_S`)."""
        if not self._channel.oom_begun.is_set():
            return False
        self._channel.oom_begun.clear()
        return True

    def turned(self) -> None:
        """(Loop thread) the report the worker woke the loop for is read (or not coming):
        the worker's pass goes on."""
        self._channel.loop_turned.set()

    def request_levels(self) -> None:
        """Queue the counter levels after a counter pass now (for a checkpoint).  Now, at
        the loop's tick, not at the worker's next pass: that pass is often a kill's, and a
        checkpoint taken amid a burst leaves a restart more rises owed a report."""
        self._channel.levels_asked.set()
        self._channel.poke()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread, which queues the final counter levels and closes what it owned
        (a worker never started does so here)."""
        self._channel.stop.set()
        self._channel.poke()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout_s)
        self._channel.close()
        owner, self._unstarted = self._unstarted, None
        if owner is not None:
            owner.finish()


def _run_handed(handoff: queue.SimpleQueue[CgroupThread]) -> None:
    """(The worker's thread) take the `CgroupThread` and run it."""
    handoff.get_nowait().run()
