"""Cgroup counters and memory sampling on their own thread, off the kernel log's loop.

Reading hundreds of cgroup files takes 10-30 ms a second on a busy node; done on the loop
that reads /dev/kmsg, a kill arriving meanwhile would wait for it.  This worker makes and
owns the `CgroupWatcher` (from the factory it is given: no one else holds it), the
`TimelineSampler` and the forecast (`ForecastWatch`), and closes them when it stops.  The
loop receives counter increases through a queue (and a wake-up) with the `CgroupView`
published last (limits, watched set, the timelines of the containers in trouble as a
snapshot), the forecast's changes since its last take, and, when asked for them
(`request_levels()`), the counter levels; it asks for an early rescan with
`request_rescan()`.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from oomwatch.cgroups import CgroupWatcher, TimelineSampler, WatchedCgroup
from oomwatch.cgroups.attention import (
    COLD_INTERVAL_S,
    HOT_HOLD_S,
    KILLED_HOLD_S,
    UsageThresholds,
    deepest,
    near_limit,
)
from oomwatch.cgroups.oom_events import HOT_POLL_INTERVAL_S, OomSignal, Sighting, pids_in
from oomwatch.cgroups.pressure import PressureWatch
from oomwatch.cgroups.timeline_snapshot import SnapshotMaker
from oomwatch.daemon.cgroup_view import CgroupBatch, CgroupView, CounterLevels
from oomwatch.daemon.forecast_news import Countdown, ForecastChange, ForecastNews
from oomwatch.daemon.forecasting import ForecastWatch
from oomwatch.daemon.sample_hold import SampleHold
from oomwatch.incident import TimelineSample
from oomwatch.reconcile import CgroupNews, CounterKills
from oomwatch.stages import EventLogger

# A sample due this soon after a counter poll is taken in the same wake-up: the two 1 s
# timers then stay in step instead of waking the thread twice a second.
SAMPLE_EARLY_S = 0.05
# Timed passes come at most this often, so a pass that fails and leaves its work due cannot
# spin the thread (inotify and pokes still wake it at once).
MIN_PASS_GAP_S = 0.1

# v1 usage thresholds registered per sample pass, at most (each waits for an RCU grace period,
# ~10 ms: a node's first pass would otherwise hold the worker for seconds).
THRESHOLDS_PER_PASS = 16

OnSamples = Callable[[list[tuple[WatchedCgroup, TimelineSample]], float, CgroupView], None]
"""(Worker thread) the samples of one pass, their wall time and the view they leave."""


def attentive_sampler(interval_s: float, window_s: float) -> TimelineSampler:
    """The agent's sampler: every `interval_s` for containers that need attention, one per
    `COLD_INTERVAL_S` for the others, v1 usage thresholds where the kernel takes them."""
    cold_s = max(interval_s, COLD_INTERVAL_S)
    return TimelineSampler(
        interval_s, window_s, cold_interval_s=cold_s, thresholds=UsageThresholds()
    )


class CgroupWorker:
    """Runs the watcher and the sampler on a daemon thread; everything else reads results."""

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
        """`watcher` makes the watcher this worker owns; `forecast_horizon_s`: how far ahead
        the forecast warns (None: no forecast)."""
        self._watcher = watcher()
        self._sampler = sampler
        self.deltas: queue.SimpleQueue[CgroupBatch] = queue.SimpleQueue()
        # The one thing the loop reads: replaced whole, never changed in place.
        self._view = CgroupView(
            watched=frozenset(cg.relpath for cg in self._watcher.cgroups()),
            hierarchies=tuple(self._watcher.hierarchies),
            ask_timeline=self._ask_timeline,
            oom_notify_failure=self._watcher.witness.failure,
        )
        self._forecast = (
            None
            if forecast_horizon_s is None
            else ForecastWatch(
                timeline_for=sampler.freeze,  # the forecast runs on this thread
                logger=log,
                horizon_s=forecast_horizon_s,
                pressure=PressureWatch(),
                attend=self.attend,
            )
        )
        self._forecasts: queue.SimpleQueue[list[ForecastChange]] = queue.SimpleQueue()
        self._forecast_takes = 0  # (loop thread) takes that carried forecast changes
        self._levels: CounterLevels | None = None  # (loop thread) taken, still true
        self._generation = -1  # of the watcher's set the sampler last took
        self._on_samples = on_samples
        self._wake = wake
        self._log = log
        self._snapshots = SnapshotMaker(sampler.window_s, sampler.interval_s)
        self.batches = 0  # (worker thread) batches queued so far
        self.batches_taken = 0  # (loop thread) ... and taken by the loop
        self._levels_asked = threading.Event()
        self._stop = threading.Event()
        self._rescan = threading.Event()
        self._force = threading.Event()
        self._events_moved = False  # a v2 memory.events moved: sample in this wake-up
        self._hold = SampleHold()  # a sample owed waits while the loop handles a kill
        self._pipe_r, self._pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._closed = False  # the pipe, once stopped: nothing to poke
        self._thread = threading.Thread(target=self._run, name="oomwatch-cgroups", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def request_rescan(self) -> None:
        """Look for new cgroups now (a kill named one we do not watch yet)."""
        self._rescan.set()
        self._poke()

    @property
    def view(self) -> CgroupView:
        """The snapshot published last (any thread: a value)."""
        return self._view

    def take_news(self) -> tuple[CgroupNews | None, CgroupView]:
        """(Loop thread) everything queued since the last look, as one piece of news, with
        the view published last (at least as new as the news) carrying the forecast's
        changes since the last take.  The take stops at a batch of counter levels: the
        views carry them from then on, for as long as they explain every batch taken."""
        kills: list[CounterKills] = []
        signals: list[OomSignal] = []
        sightings: list[Sighting] = []
        counted_at_s: float | None = None
        taken = False
        levels: CounterLevels | None = None
        while not self.deltas.empty():
            batch = self.deltas.get_nowait()
            self.batches_taken += 1
            if batch.levels is not None:
                levels = batch.levels
                if not self.deltas.empty():
                    self._wake()  # the rest on the next turn, right after this one
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
        view = self._view  # read after the queue: published before what was taken
        changes: list[ForecastChange] = []
        while not self._forecasts.empty():
            changes += self._forecasts.get_nowait()
        if changes:
            self._forecast_takes += 1
            view = replace(view, forecast=ForecastNews(self._forecast_takes, tuple(changes)))
        if levels is not None or taken:
            self._levels = levels
        return news, view if self._levels is None else replace(view, levels=self._levels)

    def request_pass(self) -> None:
        """Read the counters now (a kill line with no cgroup arrived: its counter has moved);
        the batch that follows says when the pass began, even if it found nothing."""
        self._force.set()
        self._poke()

    def request_levels(self) -> None:
        """Queue the counter levels after a counter pass now (for a checkpoint).  Now, at
        the loop's tick, not at the worker's next pass: that pass is often a kill's, and a
        checkpoint taken amid a burst leaves a restart more rises owed a report."""
        self._levels_asked.set()
        self._poke()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread; then queue the final counter levels and close what it owned (if
        it stopped: a thread still running keeps them)."""
        self._stop.set()
        self._poke()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._closed = True
        for fd in (self._pipe_r, self._pipe_w):
            os.close(fd)
        if self._thread.is_alive():
            return
        self._queue_levels()
        closers = [self._watcher.close, self._sampler.close]
        if self._forecast is not None:
            closers.append(self._forecast.close)
        for closer in closers:
            try:
                closer()
            except Exception:
                self._log.exception("cgroup_close_failed")

    def _poke(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._pipe_w, b"\0")

    def _run(self) -> None:
        """Sleep until inotify, a poke, the watcher's next timed pass or the next sample.

        An idle node wakes this thread once a sample interval, not more: the watcher's
        clock is CLOCK_MONOTONIC, like the one here.
        """
        poller = select.poll()
        poller.register(self._pipe_r, select.POLLIN)
        thresholds = self._sampler.thresholds
        threshold_fd = thresholds.fileno() if thresholds is not None else None
        watcher = self._watcher
        for fd in (watcher.fileno(), watcher.witness.fileno(), threshold_fd):
            if fd is not None:
                poller.register(fd, select.POLLIN)
        next_sample = last_pass = time.monotonic()
        while not self._stop.is_set():
            gap_s = HOT_POLL_INTERVAL_S if watcher.witness.hot else MIN_PASS_GAP_S
            due_s = min(next_sample, watcher.next_due_s(), self._hold.wake_by_s())
            wake_at = max(due_s, last_pass + gap_s)
            timeout_ms = max(0.0, wake_at - time.monotonic()) * 1000.0
            ready = {fd for fd, _ in poller.poll(math.ceil(timeout_ms))}
            if self._pipe_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._pipe_r, 4096)
            if self._stop.is_set():
                break
            self._answer()
            self._counters()
            last_pass = time.monotonic()
            crossed = threshold_fd in ready and self._attend_crossed()
            moved, self._events_moved = self._events_moved, False
            due = crossed or moved or last_pass >= next_sample - SAMPLE_EARLY_S
            if self._hold.sample_now(due, last_pass):
                self._sample()
                next_sample = time.monotonic() + self._sampler.interval_s

    def _counters(self) -> None:
        queued = self._poll_counters()
        if self._levels_asked.is_set():
            self._levels_asked.clear()
            self._queue_levels()
            queued = True
        if queued:
            self._wake()

    def _queue_levels(self) -> None:
        """The levels every batch queued so far explains, as a batch of their own."""
        try:
            counters = self._watcher.counter_levels()
        except Exception:
            self._log.exception("cgroup_counters_failed")
            return
        self._queue(CgroupBatch([], [], [], None, CounterLevels(counters, self.batches + 1)))

    def _poll_counters(self) -> bool:
        forced = self._force.is_set()
        self._force.clear()
        started_at_s = time.monotonic()
        if forced:  # asked for by the loop once a kill line is handled (or at start-up)
            self._hold.kill_handled()
        try:
            if self._rescan.is_set():
                self._rescan.clear()
                self._watcher.rescan()
                watched = frozenset(cg.relpath for cg in self._watcher.cgroups())
                self._view = replace(self._view, watched=watched)
            deltas = self._watcher.poll_changes(force=forced)
        except Exception:
            self._log.exception("cgroup_counters_failed")
            return False
        witness = self._watcher.witness
        signals, witness.signals = witness.signals, []
        sightings, witness.sightings = witness.sightings, []
        killed = [d.cgroup.relpath for d in deltas if d.oom_kill > 0 or d.oom > 0]
        if killed or signals:
            if not forced:  # news the loop has yet to handle
                self._hold.kill_news(started_at_s)
            self.attend([*killed, *(signal.cgroup for signal in signals)], KILLED_HOLD_S)
            self._publish_timelines()  # before the batch: the kill's view holds its window
        moved, self._watcher.events_moved = self._watcher.events_moved, set()
        if moved:  # v2: a memory event (high, max, ...) in these: sample them now
            now_wall = time.time()
            for relpath in deepest(moved):
                self._sampler.attend_moved(relpath, now_wall, HOT_HOLD_S)
            self._events_moved = True
        if not (deltas or signals or sightings or forced):
            return False
        self._queue(CgroupBatch(deltas, signals, sightings, started_at_s if forced else None))
        return True

    def _publish_timelines(self, asked: Sequence[str] = ()) -> None:
        """A view holding the containers sampled every interval now, and those `asked` for."""
        now_s = time.monotonic()
        attended = self._sampler.attended(time.time())
        timelines = self._snapshots.refresh(attended, now_s, asked)
        self._view = replace(self._view, timelines=timelines)

    def _ask_timeline(self, relpath: str) -> None:
        """(Any thread) a kill in this container wants its window: see `_answer`."""
        self._snapshots.request(relpath)
        self._poke()

    def _answer(self) -> None:
        """Snapshot the containers asked for (sampled every interval from now on, as after
        a kill) and wake the loop, whose next view holds them."""
        if asked := self._snapshots.take_requests():
            try:
                self.attend(asked, KILLED_HOLD_S)
                self._publish_timelines(asked)
            except Exception:  # the kill waits out the pipeline's deferral instead
                self._log.exception("timeline_snapshot_failed")
            self._wake()

    def attend(self, relpaths: list[str], hold_s: float) -> None:
        """Sample these cgroups' containers every interval for `hold_s` (this thread only,
        as every use of the sampler: kill news, asked-for windows, the forecast)."""
        now_wall = time.time()
        for relpath in relpaths:
            self._sampler.attend(relpath, now_wall, hold_s)

    def _attend_crossed(self) -> bool:
        """A v1 container's usage crossed half its limit: sample it now, and every second."""
        assert self._sampler.thresholds is not None
        crossed = self._sampler.thresholds.crossed()
        if crossed:
            self.attend(crossed, HOT_HOLD_S)
        return bool(crossed)

    def _queue(self, batch: CgroupBatch) -> None:
        self.batches += 1
        self.deltas.put(batch)

    def _sample(self) -> None:
        now_wall = time.time()
        try:
            # the watched set only when it changed: a pass then costs the containers due
            generation = self._watcher.generation
            cgroups = self._watcher.cgroups() if generation != self._generation else None
            samples = self._sampler.sample(cgroups, now_wall)
            limits = self._sampler.limits_bytes()
            attended = self._sampler.attended(now_wall)
            timelines = self._snapshots.refresh(attended, time.monotonic())
            self._arm_thresholds()
            failure = self._watcher.witness.failure
            if cgroups is not None:
                watched = frozenset(cg.relpath for cg in cgroups)
                self._view = replace(self._view, watched=watched)
                self._generation = generation
            self._view = replace(
                self._view, limits_bytes=limits, oom_notify_failure=failure, timelines=timelines
            )
            view = self._view
            self._note_limits(samples)
            self._on_samples(samples, now_wall, view)
            if self._forecast is not None:
                self._forecasted(self._forecast.observe(samples, now_wall, view.watched))
        except Exception:
            self._log.exception("memory_sampling_failed")

    def _forecasted(self, changes: list[ForecastChange]) -> None:
        """Hand the forecast's changes to the loop; wake it for all but a countdown."""
        if changes:
            self._forecasts.put(changes)
            if not all(isinstance(change, Countdown) for change in changes):
                self._wake()

    def _arm_thresholds(self) -> None:
        """(After the pass, on this thread) register new containers' usage thresholds, one
        at a time, and stop when a counter pass is asked for: a bare kill waits on it."""
        for _ in range(THRESHOLDS_PER_PASS):
            if self._force.is_set() or self._stop.is_set() or not self._sampler.arm_thresholds(1):
                return

    def _note_limits(self, samples: list[tuple[WatchedCgroup, TimelineSample]]) -> None:
        """Look at the pids of containers near their limits."""
        near = near_limit(samples)
        if not near:
            return
        now_s = time.monotonic()
        seen = [Sighting(pid, cg.relpath, now_s) for cg in near for pid in pids_in(cg.fs_path)]
        if seen:
            self._queue(CgroupBatch([], [], seen, None))
            self._wake()
