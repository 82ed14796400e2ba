"""The cgroup worker's own thread: the watcher, the sampler and the forecast, and their loop.

`CgroupThread` is made by `CgroupWorker` (oomwatch.daemon.cgroup_worker) and handed to the
thread it starts; nothing the loop holds leads to it.  It reads counters (inotify, OOM
notifications, timed passes) and samples memory, and says what it found only through the
`CgroupChannel`: batches of news, the forecast's changes and a new `CgroupView` each time
the cgroups change.  When it stops it queues the final counter levels and closes what it made.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from oomwatch.cgroups import CgroupWatcher, TimelineSampler, WatchedCgroup
from oomwatch.cgroups.attention import (
    HOT_HOLD_S,
    KILLED_HOLD_S,
    deepest,
    near_limit,
)
from oomwatch.cgroups.oom_events import HOT_POLL_INTERVAL_S, Sighting, pids_in
from oomwatch.cgroups.pressure import PressureWatch
from oomwatch.cgroups.timeline_snapshot import SnapshotMaker
from oomwatch.daemon.cgroup_channel import REPORT_FIRST_S, CgroupChannel
from oomwatch.daemon.cgroup_view import CgroupBatch, CgroupView, CounterLevels
from oomwatch.daemon.forecast_news import Countdown, ForecastChange
from oomwatch.daemon.forecasting import ForecastWatch
from oomwatch.daemon.sample_hold import SampleHold
from oomwatch.incident import TimelineSample
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


class CgroupThread:
    """(oomwatch-cgroups only, once started) the watcher, the sampler and the forecast."""

    def __init__(
        self,
        watcher: CgroupWatcher,
        sampler: TimelineSampler,
        channel: CgroupChannel,
        *,
        on_samples: OnSamples,
        log: EventLogger,
        forecast_horizon_s: float | None = None,
    ) -> None:
        self._watcher = watcher
        self._sampler = sampler
        self._channel = channel
        channel.view = CgroupView(
            watched=frozenset(cg.relpath for cg in watcher.cgroups()),
            hierarchies=tuple(watcher.hierarchies),
            ask_timeline=channel.ask_timeline,
            oom_notify_failure=watcher.witness.failure,
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
        self._generation = -1  # of the watcher's set the sampler last took
        self._on_samples = on_samples
        self._log = log
        self._snapshots = SnapshotMaker(sampler.window_s, sampler.interval_s)
        self.batches = 0  # batches queued so far
        self._events_moved = False  # a v2 memory.events moved: sample in this wake-up
        self._hold = SampleHold()  # a sample owed waits while the loop handles a kill

    def run(self) -> None:
        """The thread's body: until the channel's stop, then `finish`."""
        try:
            self._loop()
        finally:
            self.finish()

    def finish(self) -> None:
        """Queue the final counter levels and close what this thread made."""
        self._queue_levels()
        closers = [self._watcher.close, self._sampler.close]
        if self._forecast is not None:
            closers.append(self._forecast.close)
        for closer in closers:
            try:
                closer()
            except Exception:
                self._log.exception("cgroup_close_failed")

    def _loop(self) -> None:
        """Sleep until inotify, a poke, the watcher's next timed pass or the next sample.

        An idle node wakes this thread once a sample interval, not more: the watcher's
        clock is CLOCK_MONOTONIC, like the one here.
        """
        channel = self._channel
        poller = select.poll()
        poller.register(channel.pipe_r, select.POLLIN)
        thresholds = self._sampler.thresholds
        threshold_fd = thresholds.fileno() if thresholds is not None else None
        watcher = self._watcher
        witness_fd = watcher.witness.fileno()
        for fd in (watcher.fileno(), witness_fd, threshold_fd):
            if fd is not None:
                poller.register(fd, select.POLLIN)
        next_sample = last_pass = time.monotonic()
        while not channel.stop.is_set():
            gap_s = HOT_POLL_INTERVAL_S if watcher.witness.hot else MIN_PASS_GAP_S
            due_s = min(next_sample, watcher.next_due_s(), self._hold.wake_by_s())
            wake_at = max(due_s, last_pass + gap_s)
            timeout_ms = max(0.0, wake_at - time.monotonic()) * 1000.0
            ready = {fd for fd, _ in poller.poll(math.ceil(timeout_ms))}
            if channel.pipe_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(channel.pipe_r, 4096)
            if channel.stop.is_set():
                break
            if witness_fd in ready and watcher.witness.note_fired(time.monotonic()):
                self._loop_first()
            self._answer()
            self._counters()
            last_pass = time.monotonic()
            crossed = threshold_fd in ready and self._attend_crossed()
            moved, self._events_moved = self._events_moved, False
            due = crossed or moved or last_pass >= next_sample - SAMPLE_EARLY_S
            if self._hold.sample_now(due, last_pass):
                self._sample()
                next_sample = time.monotonic() + self._sampler.interval_s

    def _loop_first(self) -> None:
        """An OOM notification, its pids read: its containers attended and their memory
        windows published (the loop's kill takes them from the view), then the loop is
        woken to read the report, and this thread waits for it (`REPORT_FIRST_S`) before
        its own pass, unless the loop has asked for that pass already (a kill line read
        before the notification was: a header-less kill's placing waits on the pass)."""
        channel = self._channel
        self.attend([signal.cgroup for signal in self._watcher.witness.signals], KILLED_HOLD_S)
        self._publish_timelines()
        channel.loop_turned.clear()
        channel.oom_begun.set()
        channel.wake()
        if not channel.force.is_set():  # the loop has read a kill line and asks: go on
            channel.loop_turned.wait(REPORT_FIRST_S)

    def _counters(self) -> None:
        queued = self._poll_counters()
        if self._channel.levels_asked.is_set():
            self._channel.levels_asked.clear()
            self._queue_levels()
            queued = True
        if queued:
            self._channel.wake()

    def _queue_levels(self) -> None:
        """The levels every batch queued so far explains, as a batch of their own."""
        try:
            counters = self._watcher.counter_levels()
        except Exception:
            self._log.exception("cgroup_counters_failed")
            return
        self._queue(CgroupBatch([], [], [], None, CounterLevels(counters, self.batches + 1)))

    def _poll_counters(self) -> bool:
        channel = self._channel
        forced = channel.force.is_set()
        channel.force.clear()
        started_at_s = time.monotonic()
        if forced:  # asked for by the loop once a kill line is handled (or at start-up)
            self._hold.kill_handled()
        try:
            if channel.rescan.is_set():
                channel.rescan.clear()
                self._watcher.rescan()
                watched = frozenset(cg.relpath for cg in self._watcher.cgroups())
                channel.view = replace(channel.view, watched=watched)
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
        self._channel.view = replace(self._channel.view, timelines=timelines)

    def _answer(self) -> None:
        """Snapshot the containers asked for (sampled every interval from now on, as after
        a kill) and wake the loop, whose next view holds them."""
        if asked := self._channel.take_timeline_asks():
            try:
                self.attend(asked, KILLED_HOLD_S)
                self._publish_timelines(asked)
            except Exception:  # the kill waits out the pipeline's deferral instead
                self._log.exception("timeline_snapshot_failed")
            self._channel.wake()

    def attend(self, relpaths: list[str], hold_s: float) -> None:
        """Sample these cgroups' containers every interval for `hold_s` (kill news,
        asked-for windows, the forecast)."""
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
        self._channel.batches.put(batch)

    def _sample(self) -> None:
        channel = self._channel
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
                channel.view = replace(channel.view, watched=watched)
                self._generation = generation
            channel.view = replace(
                channel.view, limits_bytes=limits, oom_notify_failure=failure, timelines=timelines
            )
            view = channel.view
            self._note_limits(samples)
            self._on_samples(samples, now_wall, view)
            if self._forecast is not None:
                self._forecasted(self._forecast.observe(samples, now_wall, view.watched))
        except Exception:
            self._log.exception("memory_sampling_failed")

    def _forecasted(self, changes: list[ForecastChange]) -> None:
        """Hand the forecast's changes to the loop; wake it for all but a countdown."""
        if changes:
            self._channel.forecasts.put(changes)
            if not all(isinstance(change, Countdown) for change in changes):
                self._channel.wake()

    def _arm_thresholds(self) -> None:
        """(After the pass) register new containers' usage thresholds, one at a time, and
        stop when a counter pass is asked for: a bare kill waits on it."""
        channel = self._channel
        for _ in range(THRESHOLDS_PER_PASS):
            if channel.force.is_set() or channel.stop.is_set():
                return
            if not self._sampler.arm_thresholds(1):
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
            self._channel.wake()
