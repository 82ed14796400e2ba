"""The one object the kernel log's loop and the cgroup worker's thread both hold.

It carries only what is safe from any thread: queues (batches of news, the forecast's
changes, the containers whose memory window a kill wants), events (stop, rescan, a counter
pass, the counter levels), the wake-up pipe and the last `CgroupView` (a frozen value,
replaced whole by the worker).  Neither side reaches the other's objects through it: the
watcher, the sampler and the forecast are the worker's (`cgroup_thread.CgroupThread`), what
the loop has taken is the loop's (`cgroup_worker.CgroupWorker`).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable

from oomwatch.daemon.cgroup_view import CgroupBatch, CgroupView
from oomwatch.daemon.forecast_news import ForecastChange
from oomwatch.queue_drain import drain

# An OOM notification comes as its report is printed, just before its kill line, and the
# kernel wakes /dev/kmsg readers only from a lazy irq_work, at the printing CPU's next timer
# tick (`wake_up_klogd_work` is `IRQ_WORK_INIT_LAZY` in kernel/printk/printk.c): up to 1/HZ
# (4 ms at HZ=250) after the kill line is readable.  So the worker, once the notification's
# pids are read, wakes the loop with `oom_begun`; for this long the loop looks at the kernel
# log every millisecond until a report closes, and the worker's counter pass waits
# for it (`loop_turned`): run first, it would hold the GIL through the kill's decode and
# store.  The rise's dating loses nothing: the first pass after a notification mostly comes
# after the kill already, and its later end only widens the bracket's upper side.
REPORT_FIRST_S = 0.01


class CgroupChannel:
    """Messages between the loop and the cgroup worker's thread, and the view published last."""

    def __init__(self, wake: Callable[[], None]) -> None:
        """`wake` rings the loop (any thread)."""
        self.wake = wake
        self.batches: queue.SimpleQueue[CgroupBatch] = queue.SimpleQueue()
        self.forecasts: queue.SimpleQueue[list[ForecastChange]] = queue.SimpleQueue()
        self._timeline_asks: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.view = CgroupView()  # (worker thread writes) replaced whole, never changed
        self.stop = threading.Event()
        self.rescan = threading.Event()
        self.force = threading.Event()
        self.levels_asked = threading.Event()
        self.oom_begun = threading.Event()  # (worker sets) the loop is woken for a report
        self.loop_turned = threading.Event()  # (loop sets) ... and has read it, or gave up
        self.pipe_r, self._pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._closed = False  # the pipe, once stopped: nothing to poke

    def poke(self) -> None:
        """(Any thread) wake the worker."""
        if self._closed:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._pipe_w, b"\0")

    def ask_timeline(self, relpath: str) -> None:
        """(Any thread) a kill in this container wants its memory window: the worker
        snapshots it on its own thread, then wakes the loop."""
        self._timeline_asks.put(relpath)
        self.poke()

    def take_timeline_asks(self) -> list[str]:
        """(Worker thread) the containers asked for since the last take."""
        return drain(self._timeline_asks)

    def close(self) -> None:
        """Close the pipe (the worker has stopped, or will not be waited for)."""
        if self._closed:
            return
        self._closed = True
        for fd in (self.pipe_r, self._pipe_w):
            os.close(fd)
