"""What other threads may hand the kernel log's loop: a wake-up and incidents found elsewhere.

The loop owns the pipeline, the reconciliation and the store's writes; the Kubernetes
threads (evictions, false OOMKilled) and the cgroup worker reach it only through this
object, which holds a queue and a pipe and nothing of the loop's.
"""

from __future__ import annotations

import contextlib
import os
import queue

from oomwatch.incident import Incident
from oomwatch.queue_drain import drain


class LoopInbox:
    """(Any thread) `wake()` and `submit()`; (loop thread) the rest."""

    def __init__(self) -> None:
        self._submitted: queue.SimpleQueue[Incident] = queue.SimpleQueue()
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def wake(self) -> None:
        """(Any thread) end the loop's wait now."""
        with contextlib.suppress(OSError):  # full (already woken) or closed (shut down)
            os.write(self._write_fd, b"\0")

    def submit(self, incident: Incident) -> None:
        """(Any thread) hand an incident found elsewhere, and wake the loop."""
        self._submitted.put(incident)
        self.wake()

    def fileno(self) -> int:
        """What the loop polls: readable once woken."""
        return self._read_fd

    def clear(self) -> None:
        """(Loop thread) the wake-ups so far are seen."""
        with contextlib.suppress(BlockingIOError):
            os.read(self._read_fd, 4096)

    def take(self) -> list[Incident]:
        """(Loop thread) the incidents submitted since the last take."""
        return drain(self._submitted)

    def close(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            os.close(fd)
