"""The daemon's reader of flight-recorder files: every file is hostile input.

Any pod that mounts the probe directory can put anything there: a symlink to a host file, a
device node, a FIFO, a 10 GiB sparse file, garbage, a JSON nesting bomb, a file of another
user, thousands of entries.  So:

- each entry is `fstatat`-ed without following links *before* anything opens it: only
  small, recent, single-link regular files of an allowed owner go on.  The file is then
  opened `O_PATH|O_NOFOLLOW` (which never reaches a driver), checked to be that same inode,
  and only then reopened for reading through `/proc/self/fd`: a name swapped for a device
  between the checks is refused, never opened;
- only the newest `keep_samples` samples and `keep_events` framework OOMs of a file are
  parsed and kept, and all files together are held under one byte budget (past it, a file
  keeps only its newest sample and event);
- a walk looks at no more than `max_entries` directory entries (`POD_DIR_ENTRIES` in each
  per-pod directory) and `max_files` flight records, and for no longer than `max_walk_s`,
  listing included; the next walk goes on where it stopped, so junk can delay a real file
  by a few walks but never hide it;
- any failure on one file (including ones this module did not foresee) refuses that file
  alone, logged within bounds (oomwatch.probe.refusals).  Reading never raises.

Files sit at the top of the directory or one level down, in a directory named like a pod
UID: that is where a pod that mounts only its own `subPathExpr: $(POD_UID)` writes.  In a
pod's directory a probe's socket (`<stem>.sock`) hands over its 0600 ring files as
descriptors (oomwatch.probe.handoff); they pass the same checks, on `fstat`.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from oomwatch.probe.flight_record import EVENT_COST_BYTES as EVENT_COST_BYTES
from oomwatch.probe.flight_record import SAMPLE_COST_BYTES as SAMPLE_COST_BYTES
from oomwatch.probe.flight_record import FlightRecord as FlightRecord
from oomwatch.probe.flight_record import parse_flight_record as parse_flight_record
from oomwatch.probe.flight_record import record_cost
from oomwatch.probe.handoff import (
    SOCKET_NAME,
    SOCKET_SUFFIX,
    SOCKET_TIMEOUT_S,
    HeldRings,
    covered,
    socket_stem,
)
from oomwatch.probe.no_follow import ProbeFileError as ProbeFileError
from oomwatch.probe.no_follow import Skip, open_pod_dir, read_capped, read_regular
from oomwatch.probe.reader_limits import CLOCK_EVERY_ENTRIES as CLOCK_EVERY_ENTRIES
from oomwatch.probe.reader_limits import FILES_PER_POD_DIR as FILES_PER_POD_DIR
from oomwatch.probe.reader_limits import POD_DIR_ENTRIES as POD_DIR_ENTRIES
from oomwatch.probe.reader_limits import ReaderLimits as ReaderLimits
from oomwatch.probe.refusals import REFUSAL_LINES as REFUSAL_LINES
from oomwatch.probe.refusals import RefusalLog
from oomwatch.probe.ring import FILE_SUFFIX, HEADER_BYTES

log = logging.getLogger("oomwatch.probe.reader")

IDLE_S = 2.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,250}" + re.escape(FILE_SUFFIX))
POD_DIR = re.compile(r"[0-9a-f][0-9a-f-]{7,63}")  # a pod UID (or a static pod's config hash)


class RecordSource(Protocol):
    """What reads flight records: `ProbeDirReader`, or a snapshot of its walks taken on
    another thread (oomwatch.daemon.probe_worker)."""

    def read_all(self, now_wall_s: float | None = None) -> list[FlightRecord]: ...

    def read_after(self, wall_s: float) -> list[FlightRecord] | None:
        """The records of a walk begun after `wall_s`, or None (one is then asked for): a
        kill's join needs what the trainer wrote up to its death, not an older walk."""
        ...

    def close(self) -> None: ...


@dataclass(slots=True)
class _Kept:
    key: tuple[int, int, int, int]  # inode, mtime ns, size, owner
    record: FlightRecord
    cost: int


class ProbeDirReader:
    """Reads every acceptable flight record in one directory; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        limits: ReaderLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.limits = limits or ReaderLimits()
        self._clock = clock
        self._dir_fd: int | None = None
        # Parsed records by name and file version: an idle file is parsed once, not per poll.
        self._kept: dict[str, _Kept] = {}
        self._held = HeldRings(self.limits.max_held_fds)  # 0600 rings, by socket name
        self.kept_bytes = 0
        self._pending: deque[str] = deque()  # names of the current window not read yet
        self._offset = 0  # directory entries the next window skips
        self._window_ends_cycle = False  # the current window reached the end of the listing
        self._seen: set[str] = set()  # names read in the current cycle
        self._refusals = RefusalLog(log, clock)

    def read_all(self, now_wall_s: float | None = None) -> list[FlightRecord]:
        """Records read now, then those kept from earlier walks of this cycle."""
        now = time.time() if now_wall_s is None else now_wall_s
        dir_fd = self._open_dir()
        if dir_fd is None:
            return []
        deadline = self._clock() + self.limits.max_walk_s
        if not self._pending:
            names, self._window_ends_cycle = self._scan(dir_fd, deadline)
            self._pending.extend(names)
        read: list[FlightRecord] = []
        tried = 0
        while self._pending:
            if tried and self._clock() > deadline:  # at least one file a walk: progress
                limit = self.limits.max_walk_s
                self._refusals.refuse(
                    "*", f"walk over {limit} s: the rest is read next time", (0, 0)
                )
                break
            tried += 1
            name = self._pending.popleft()
            if name.endswith(SOCKET_SUFFIX):
                records = self._read_socket(name, now, deadline)
            else:
                records = [r for r in [self._read_entry(name, now)] if r is not None]
            read += records
            if records and len(self._seen) < 4 * self.limits.max_files:  # past it: read again
                self._seen.update([name, *(r.name for r in records)])
        self._refusals.summarise()
        if not self._pending and self._window_ends_cycle:
            for gone in set(self._kept) - self._seen:
                self._forget(gone)
            self._held.release_except(self._seen)
            self._seen = set()
            self._window_ends_cycle = False
        fresh = {r.name for r in read}
        return read + [k.record for name, k in self._kept.items() if name not in fresh]

    def read_after(self, wall_s: float) -> list[FlightRecord]:
        """A walk now: it begins after any `wall_s` already past."""
        return self.read_all()

    def read_one(self, name: str, now_wall_s: float | None = None) -> FlightRecord:
        """Read one file by name; raises ProbeFileError saying why it was refused."""
        if self._open_dir() is None:
            raise ProbeFileError(f"probe directory {self.directory} cannot be opened")
        now = time.time() if now_wall_s is None else now_wall_s
        try:
            return self._load(name, now)
        except Skip as exc:
            raise ProbeFileError(str(exc) or "stale") from None

    def close(self) -> None:
        self._held.close()
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def _open_dir(self) -> int | None:
        if self._dir_fd is None:
            try:
                self._dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                log.debug(
                    "probe_dir_unavailable", extra={"path": str(self.directory), "error": str(exc)}
                )
        return self._dir_fd

    def _scan(self, dir_fd: int, deadline: float) -> tuple[list[str], bool]:
        """The flight-record names of the next window of the listing (sorted), and whether
        the window reached its end.  Looks at `max_entries` entries and keeps `max_files`
        names at most, until `deadline`; the next window starts after the last entry
        looked at."""
        limits = self.limits
        names: list[str] = []
        start, position = self._offset, 0
        try:
            with os.scandir(dir_fd) as entries:
                for position, entry in enumerate(entries):
                    late = (
                        position > 0
                        and position % CLOCK_EVERY_ENTRIES == 0
                        and self._clock() > deadline
                    )
                    if position < start and not late:
                        continue
                    if (
                        position - start >= limits.max_entries
                        or len(names) >= limits.max_files
                        or late
                    ):
                        self._offset = max(position, start) if late else position
                        reason = (
                            f"more than {limits.max_entries} entries or {limits.max_files}"
                            f" records, or {limits.max_walk_s} s: read in turns"
                        )
                        self._refusals.refuse("*", reason, (0, 0))
                        return sorted(names), False
                    if entry.name.endswith(FILE_SUFFIX):
                        names.append(entry.name)
                    elif POD_DIR.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                        names += self._list_pod_dir(dir_fd, entry.name)
        except OSError as exc:
            log.warning(
                "probe_dir_unreadable", extra={"path": str(self.directory), "error": str(exc)}
            )
        self._offset = 0
        return sorted(names), True

    def _list_pod_dir(self, dir_fd: int, pod_dir: str) -> list[str]:
        """Up to FILES_PER_POD_DIR flight-record and probe-socket names in a per-pod
        directory; a ring file its probe's socket hands over is not also read by path."""
        names: list[str] = []
        stems: set[str] = set()
        try:
            fd = os.open(
                pod_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
            )
        except OSError:
            return names
        try:
            with os.scandir(fd) as entries:
                for looked, entry in enumerate(entries, 1):
                    if entry.name.endswith(FILE_SUFFIX):
                        names.append(f"{pod_dir}/{entry.name}")
                    elif SOCKET_NAME.fullmatch(entry.name):
                        names.append(f"{pod_dir}/{entry.name}")
                        stems.add(socket_stem(entry.name))
                    if len(names) >= FILES_PER_POD_DIR or looked >= POD_DIR_ENTRIES:
                        break
        except OSError:
            pass
        finally:
            os.close(fd)
        return [n for n in names if not covered(n.rpartition("/")[2], stems)]

    def _read_socket(self, name: str, now: float, deadline: float) -> list[FlightRecord]:
        """The records of the ring files a probe's socket hands over (oomwatch.probe.handoff);
        by path when no probe listens there and none were received before."""
        pod_dir, _, base = name.rpartition("/")
        assert self._dir_fd is not None
        try:
            pod_fd = open_pod_dir(self._dir_fd, pod_dir)
        except (Skip, ProbeFileError):
            return []
        try:
            timeout_s = min(SOCKET_TIMEOUT_S, max(0.001, deadline - self._clock()))
            held = self._held.files(pod_fd, name, timeout_s, self._clock())
        except Skip:
            return []
        except ProbeFileError as exc:
            self._refusals.refuse(name, str(exc), (0, 0))
            return []
        finally:
            os.close(pod_fd)
        stem = f"{pod_dir}/{socket_stem(base)}"
        files: list[tuple[str, int | None]] = [(f"{pod_dir}/{n}", fd) for n, fd in held or []]
        if held is None:  # no probe listens, none received: by path
            files = [(f"{stem}{FILE_SUFFIX}", None), (f"{stem}.prev{FILE_SUFFIX}", None)]
        return [r for n, fd in files if (r := self._read_entry(n, now, fd)) is not None]

    def _read_entry(self, name: str, now: float, fd: int | None = None) -> FlightRecord | None:
        """The record of `name`, by path or from `fd` (a received descriptor); None if refused."""
        try:
            if fd is not None:
                cap = self.limits.max_file_bytes
                return self._from_stat(
                    name, os.fstat(fd), now, True, lambda: read_capped(fd, cap, from_start=True)
                )
            return self._load(name, now, keep=True)
        except Skip:
            self._forget(name)
        except ProbeFileError as exc:
            self._forget(name)
            version = exc.args[1] if len(exc.args) > 1 else (0, 0)
            self._refusals.refuse(name, str(exc.args[0]), version)
        except Exception as exc:  # unforeseen: this file is refused, the reader goes on
            self._forget(name)
            self._refusals.refuse(name, f"unexpected {type(exc).__name__}: {exc}"[:300], (0, 0))
        return None

    def _forget(self, name: str) -> None:
        kept = self._kept.pop(name, None)
        if kept is not None:
            self.kept_bytes -= kept.cost

    def _load(self, name: str, now: float, keep: bool = False) -> FlightRecord:
        pod_dir, _, base = name.rpartition("/")
        if not _NAME.fullmatch(base) or (pod_dir and not POD_DIR.fullmatch(pod_dir)):
            raise ProbeFileError("unexpected file name")
        assert self._dir_fd is not None
        dir_fd = open_pod_dir(self._dir_fd, pod_dir) if pod_dir else self._dir_fd
        try:
            return self._load_in(name, base, dir_fd, now, keep)
        finally:
            if dir_fd != self._dir_fd:
                os.close(dir_fd)

    def _load_in(self, name: str, base: str, dir_fd: int, now: float, keep: bool) -> FlightRecord:
        try:  # the type, size and owner before any open
            st = os.stat(base, dir_fd=dir_fd, follow_symlinks=False)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise Skip("gone") from None
            raise ProbeFileError(f"cannot stat ({os.strerror(exc.errno or 0)})") from None
        cap = self.limits.max_file_bytes
        version = (st.st_ino, st.st_mtime_ns)
        return self._from_stat(
            name, st, now, keep, lambda: read_regular(base, dir_fd, st, cap, version)
        )

    def _from_stat(
        self, name: str, st: os.stat_result, now: float, keep: bool, read: Callable[[], bytes]
    ) -> FlightRecord:
        """Check `st`, then `read()` and parse the file unless the kept record is current."""
        version = (st.st_ino, st.st_mtime_ns)
        if st.st_nlink == 0:
            raise Skip("deleted")  # a held descriptor of a file since removed
        problem = self._check_stat(st, now)
        if problem == "stale":
            raise Skip("stale")
        if problem:
            raise ProbeFileError(problem, version)
        key = (st.st_ino, st.st_mtime_ns, st.st_size, st.st_uid)
        cached = self._kept.get(name) if keep else None
        # mtime ticks coarsely: only a file idle for a while is known to be unchanged.
        if cached is not None and cached.key == key and now - st.st_mtime > IDLE_S:
            return cached.record
        data = read()
        limits, pod_dir = self.limits, name.rpartition("/")[0] or None
        try:
            record = parse_flight_record(
                name,
                data,
                st.st_mtime,
                st.st_uid,
                keep_samples=limits.keep_samples,
                keep_events=limits.keep_events,
                pod_dir=pod_dir,
            )
        except ValueError as exc:  # RingFormatError, SchemaError
            raise ProbeFileError(str(exc), version) from None
        return self._admit(name, key, record, version) if keep else record

    def _admit(
        self,
        name: str,
        key: tuple[int, int, int, int],
        record: FlightRecord,
        version: tuple[int, int],
    ) -> FlightRecord:
        """Keep the record within the byte budget and the file count; returns what was kept."""
        limits = self.limits
        old = self._kept.get(name)
        if old is None and len(self._kept) >= limits.max_files:
            raise ProbeFileError(f"{limits.max_files} flight records already kept", version)
        freed = old.cost if old is not None else 0
        cost = record_cost(record)
        if self.kept_bytes - freed + cost > limits.budget_bytes:
            record = replace(record, samples=record.samples[-1:], events=record.events[-1:])
            cost = record_cost(record)
            reason = f"byte budget of {limits.budget_bytes} for all files spent"
            self._refusals.refuse(
                name, f"{reason}: only its newest sample and OOM kept", version, what="trimmed"
            )
        self.kept_bytes += cost - freed
        self._kept[name] = _Kept(key, record, cost)
        return record

    def _check_stat(self, st: os.stat_result, now: float) -> str | None:
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_nlink != 1:
            return f"{st.st_nlink} hard links"
        if st.st_size > self.limits.max_file_bytes:
            return f"size {st.st_size} over the cap of {self.limits.max_file_bytes} bytes"
        if st.st_size < HEADER_BYTES:
            return f"truncated ({st.st_size} bytes)"
        allowed = self.limits.allowed_uids
        if allowed is not None and not any(st.st_uid in uids for uids in allowed):
            return f"owner uid {st.st_uid} not allowed"
        if now - st.st_mtime > self.limits.max_age_s:
            return "stale"
        return None
