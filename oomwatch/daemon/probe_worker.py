"""Probe directory walks on their own thread, off the kernel log's loop.

Every directory entry is the pods' to shape: thousands of entries, files rewritten every
second.  A walk is capped in time (oomwatch.probe.reader), but done on the loop that reads
/dev/kmsg (for framework OOMs each second, and again for every kill's allocator join) it
still added its time to every kill's latency.  Here one thread walks once a sample
interval and publishes what it read as a snapshot (replaced whole, never changed in place);
the framework-OOM source and the allocator join read the snapshot, which costs no I/O.  A
snapshot is at most one interval (plus one walk) old, so the allocator join asks for a walk
begun after the kill (`read_after`) and waits for it: the trainer's last samples before its
death (the phase it died in) are the ones that matter.
"""

from __future__ import annotations

import logging
import threading
import time

from oomwatch.probe.reader import FlightRecord, ProbeDirReader

log = logging.getLogger("oomwatch.daemon.probe_worker")


class ProbeWorker:
    """Walks `reader` every `interval_s` on a daemon thread; `read_all()` is its snapshot.

    Hands itself to `FrameworkOomSource` and `ProbeEnricher` as their reader: one walk, one
    parse cache and one byte budget for both, and neither touches the directory."""

    def __init__(self, reader: ProbeDirReader, interval_s: float) -> None:
        self._reader = reader
        self._interval_s = interval_s
        self._records: tuple[FlightRecord, ...] = ()
        self.walks = 0
        self.walk_began_wall_s: float | None = None  # wall clock, the start of the last walk
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="oomwatch-probe", daemon=True)
        self._thread.start()

    def read_all(self, now_wall_s: float | None = None) -> list[FlightRecord]:
        """The records of the last walk (`now_wall_s` is the walk's own)."""
        return list(self._records)

    def read_after(self, wall_s: float) -> list[FlightRecord] | None:
        """The last walk's records if it began after `wall_s`; else None, and a walk now."""
        if self.walk_began_wall_s is not None and self.walk_began_wall_s > wall_s:
            return list(self._records)  # set before walk_began_wall_s: of that walk or newer
        self._poke.set()
        return None

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop the thread and close the directory (the source and the join both call it)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._poke.set()
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._reader.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            began_wall_s = time.time()
            try:
                self._records = tuple(self._reader.read_all(began_wall_s))
            except Exception:  # the reader never raises; a bug here must not end the walks
                log.exception("probe_walk_failed")
            self.walk_began_wall_s = began_wall_s
            self.walks += 1
            self._poke.wait(self._interval_s)
            self._poke.clear()
