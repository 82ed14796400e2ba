"""Cgroup counters and memory sampling on their own thread, off the kernel log's loop.

Reading hundreds of cgroup files takes 10-30 ms a second on a busy node; done on the loop
that reads /dev/kmsg, a kill arriving meanwhile would wait for it.  This worker owns the
`CgroupWatcher` and the `TimelineSampler`: the loop receives counter increases through a
queue (and a wake-up), asks for an early rescan with `request_rescan()`, and freezes a
timeline under the lock that also guards sampling.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import select
import threading
import time
from collections.abc import Callable
from typing import Any

from oomwatch.cgroups import CgroupWatcher, CounterDelta, TimelineSampler, WatchedCgroup
from oomwatch.cgroups.counters import OomCounters
from oomwatch.incident import Timeline, TimelineSample

# A sample due this soon after a counter poll is taken in the same wake-up: the two 1 s
# timers then stay in step instead of waking the thread twice a second.
SAMPLE_EARLY_S = 0.05
# Timed passes come at most this often, so a pass that fails and leaves its work due cannot
# spin the thread (inotify and pokes still wake it at once).
MIN_PASS_GAP_S = 0.1

OnSamples = Callable[[list[tuple[WatchedCgroup, TimelineSample]], float], None]


class CgroupWorker:
    """Runs the watcher and the sampler on a daemon thread; everything else reads results."""

    def __init__(
        self,
        watcher: CgroupWatcher,
        sampler: TimelineSampler,
        *,
        on_samples: OnSamples,
        wake: Callable[[], None],
        log: Any,
    ) -> None:
        self.watcher = watcher
        self.sampler = sampler
        self.deltas: queue.SimpleQueue[list[CounterDelta]] = queue.SimpleQueue()
        self.watched: frozenset[str] = frozenset(cg.relpath for cg in watcher.cgroups())
        self._on_samples = on_samples
        self._wake = wake
        self._log = log
        self._lock = threading.Lock()  # sampling vs. freezing a timeline
        self._counter_lock = threading.Lock()  # a counter pass vs. `counter_levels()`
        self.batches = 0  # delta batches queued so far
        self._stop = threading.Event()
        self._rescan = threading.Event()
        self._pipe_r, self._pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name="oomwatch-cgroups", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def request_rescan(self) -> None:
        """Look for new cgroups now (a kill named one we do not watch yet)."""
        self._rescan.set()
        self._poke()

    def freeze(self, relpath: str, at_s: float) -> Timeline | None:
        with self._lock:
            return self.sampler.freeze(relpath, at_s)

    def counter_levels(self) -> tuple[dict[str, OomCounters], int]:
        """The counters every queued delta explains, and how many batches were queued."""
        with self._counter_lock:
            return self.watcher.counter_levels(), self.batches

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._poke()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        for fd in (self._pipe_r, self._pipe_w):
            os.close(fd)

    def _poke(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._pipe_w, b"\0")

    def _run(self) -> None:
        """Sleep until inotify, a poke, the watcher's next timed pass or the next sample.

        An idle node wakes this thread once a sample interval, not more: the watcher's
        clock is CLOCK_MONOTONIC, like the one here.
        """
        poller = select.poll()
        poller.register(self._pipe_r, select.POLLIN)
        inotify_fd = self.watcher.fileno()
        if inotify_fd is not None:
            poller.register(inotify_fd, select.POLLIN)
        next_sample = last_pass = time.monotonic()
        while not self._stop.is_set():
            wake_at = max(min(next_sample, self.watcher.next_due_s()), last_pass + MIN_PASS_GAP_S)
            timeout_ms = max(0.0, wake_at - time.monotonic()) * 1000.0
            if self._pipe_r in {fd for fd, _ in poller.poll(math.ceil(timeout_ms))}:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._pipe_r, 4096)
            if self._stop.is_set():
                break
            self._counters()
            last_pass = time.monotonic()
            if last_pass >= next_sample - SAMPLE_EARLY_S:
                self._sample()
                next_sample = time.monotonic() + self.sampler.interval_s

    def _counters(self) -> None:
        with self._counter_lock:
            deltas = self._poll_counters()
        if deltas:
            self._wake()

    def _poll_counters(self) -> list[CounterDelta]:
        try:
            if self._rescan.is_set():
                self._rescan.clear()
                self.watcher.rescan()
                self.watched = frozenset(cg.relpath for cg in self.watcher.cgroups())
            deltas = self.watcher.poll_changes()
        except Exception:
            self._log.exception("cgroup_counters_failed")
            return []
        if deltas:
            self.batches += 1
            self.deltas.put(deltas)
        return deltas

    def _sample(self) -> None:
        now_wall = time.time()
        try:
            with self._lock:
                cgroups = self.watcher.cgroups()
                samples = self.sampler.sample(cgroups, now_wall)
            self.watched = frozenset(cg.relpath for cg in cgroups)
            self._on_samples(samples, now_wall)
        except Exception:
            self._log.exception("memory_sampling_failed")
