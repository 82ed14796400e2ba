"""Probe directory walks on their own thread, off the kernel log's loop.

Every directory entry is the pods' to shape: thousands of entries, files rewritten every
second.  A walk is capped in time (oomwatch.probe.reader), but done on the loop that reads
/dev/kmsg (for framework OOMs each second, and again for every kill's allocator join) it
still added its time to every kill's latency.  Here one thread walks once a sample
interval and publishes what it read as a `ProbeWalk` (frozen, replaced whole); the
framework-OOM source and the allocator join read the last one, which costs no I/O.  A walk
is at most one interval (plus one walk) old, so the allocator join asks for a walk begun
after the kill (`read_after`) and waits for it: the trainer's last samples before its death
(the phase it died in) are the ones that matter.

Ownership is a fact of the types, not a comment: the worker is given a factory, its thread
makes the `ProbeDirReader` and holds it in a local of its own loop, and closes it there.
Nothing another thread holds leads to the reader: they get `ProbeWalk` values and send two
messages (walk now, stop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from oomwatch.probe.reader import FlightRecord, ProbeDirReader

log = logging.getLogger("oomwatch.daemon.probe_worker")


@dataclass(frozen=True, slots=True)
class ProbeWalk:
    """One finished walk: its records, when it began (wall clock; None: no walk yet) and
    how many walks there have been, itself included."""

    records: tuple[FlightRecord, ...] = ()
    began_wall_s: float | None = None
    count: int = 0


class ProbeWorker:
    """Walks the probe directory every `interval_s` on a daemon thread; `read_all()` is the
    last walk's records.

    Hands itself to `FrameworkOomSource` and `ProbeEnricher` as their reader: one walk, one
    parse cache and one byte budget for both, and neither touches the directory."""

    def __init__(self, reader: Callable[[], ProbeDirReader], interval_s: float) -> None:
        """`reader` makes the reader; it is called on the worker's thread, which alone
        holds what it returns."""
        self._walk = ProbeWalk()
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._closed = False
        self._thread = threading.Thread(
            target=_walk_loop,
            args=(reader, interval_s, self._publish, self._stop, self._poke),
            name="oomwatch-probe",
            daemon=True,
        )
        self._thread.start()

    @property
    def walk(self) -> ProbeWalk:
        """The last walk published (any thread: a value)."""
        return self._walk

    @property
    def walks(self) -> int:
        """How many walks are done."""
        return self._walk.count

    def read_all(self, now_wall_s: float | None = None) -> list[FlightRecord]:
        """The records of the last walk (`now_wall_s` is the walk's own)."""
        return list(self._walk.records)

    def read_after(self, wall_s: float) -> list[FlightRecord] | None:
        """The last walk's records if it began after `wall_s`; else None, and a walk now."""
        walk = self._walk  # one read: the records and their walk's start come together
        if walk.began_wall_s is not None and walk.began_wall_s > wall_s:
            return list(walk.records)
        self._poke.set()
        return None

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop the thread, which closes the directory (the source and the join both call
        it)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._poke.set()
        self._thread.join(timeout=5.0)

    def _publish(self, walk: ProbeWalk) -> None:
        """(Worker thread) replace the last walk whole."""
        self._walk = walk


def _walk_loop(
    make_reader: Callable[[], ProbeDirReader],
    interval_s: float,
    publish: Callable[[ProbeWalk], None],
    stop: threading.Event,
    poke: threading.Event,
) -> None:
    """The worker thread: make the reader, walk until stopped, close the reader."""
    try:
        reader = make_reader()
    except Exception:  # a bug: no walks, but the agent goes on without the probe's facts
        log.exception("probe_walk_failed")
        return
    try:
        count = 0
        records: tuple[FlightRecord, ...] = ()
        while not stop.is_set():
            began_wall_s = time.time()
            try:
                records = tuple(reader.read_all(began_wall_s))
            except Exception:  # the reader never raises; a bug here must not end the walks
                log.exception("probe_walk_failed")
            count += 1
            publish(ProbeWalk(records, began_wall_s, count))
            poke.wait(interval_s)
            poke.clear()
    finally:
        reader.close()
