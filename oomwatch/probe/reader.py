"""The daemon's reader of flight-recorder files: every file is hostile input.

Any pod that mounts the probe directory can put anything there: a symlink to a host file, a
FIFO, a 10 GiB sparse file, garbage, a file of another user.  The directory is opened once
and each entry with `O_NOFOLLOW|O_NONBLOCK` relative to it; only small, recent, single-link
regular files of an allowed owner are read, and then only through the strict schema.  A bad
file is logged (once per version of it) and skipped; reading never raises.  A walk stops at
`max_files` entries and at `max_walk_s` seconds; the next walk starts where a timed-out one
stopped, so a directory stuffed with files delays records but cannot hide one for good.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from oomwatch.probe.ring import (
    FILE_SUFFIX,
    HEADER_BYTES,
    RingFormatError,
    decode_header,
    decode_slots,
)
from oomwatch.probe.schema import (
    FrameworkOomEvent,
    ProbeMeta,
    ProbeSample,
    SchemaError,
    event_from_payload,
    meta_from_payload,
    sample_from_payload,
)
from oomwatch.sanitize import escape_control

log = logging.getLogger("oomwatch.probe.reader")

IDLE_S = 2.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,250}" + re.escape(FILE_SUFFIX))


@dataclass(frozen=True, slots=True)
class ReaderLimits:
    """What the daemon accepts; `allowed_uids` are uid ranges, None accepts any owner."""

    max_file_bytes: int = 1 << 20
    max_files: int = 1024
    max_age_s: float = 3600.0
    # ~3.6 ms to read and check one changed 128-sample file (bench/RESULTS.md): a walk reads
    # ~70 of them at most, and never holds the agent's loop for long.
    max_walk_s: float = 0.25
    allowed_uids: tuple[range, ...] | None = None


@dataclass(frozen=True, slots=True)
class FlightRecord:
    """One validated file: who wrote it, its samples (oldest first) and framework OOMs."""

    name: str
    meta: ProbeMeta
    samples: tuple[ProbeSample, ...]
    events: tuple[FrameworkOomEvent, ...]
    mtime_s: float
    owner_uid: int | None = None  # st_uid: the one thing about the file the pod cannot claim


class ProbeFileError(ValueError):
    """Why a file was refused (the message is logged with the escaped file name)."""


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
        self._logged: dict[tuple[str, str], tuple[int, int]] = {}
        # Parsed records by name and file version: an idle file is parsed once, not per poll.
        self._parsed: dict[str, tuple[tuple[int, int, int, int], FlightRecord]] = {}
        self._resume_after = ""  # the last name a timed-out walk read

    def read_all(self, now_wall_s: float | None = None) -> list[FlightRecord]:
        now = time.time() if now_wall_s is None else now_wall_s
        dir_fd = self._open_dir()
        if dir_fd is None:
            return []
        deadline = self._clock() + self.limits.max_walk_s
        names = self._list(dir_fd)
        # Names in order, starting after where the last timed-out walk stopped.
        names = [n for n in names if n > self._resume_after] + [
            n for n in names if n <= self._resume_after
        ]
        records: list[FlightRecord] = []
        for done, name in enumerate(names):
            if done and self._clock() > deadline:  # at least one file a walk: progress
                limit = self.limits.max_walk_s
                self._refuse("*", f"walk over {limit} s: the rest is read next time", (0, 0))
                self._resume_after = names[done - 1]
                # Files not reached this time count as they were when last read.
                return records + [self._parsed[n][1] for n in names[done:] if n in self._parsed]
            record = self._read_entry(name, dir_fd, now)
            if record is not None:
                records.append(record)
        self._resume_after = ""
        for gone in set(self._parsed) - set(names):
            del self._parsed[gone]
        return records

    def read_one(self, name: str, now_wall_s: float | None = None) -> FlightRecord:
        """Read one file by name; raises ProbeFileError saying why it was refused."""
        dir_fd = self._open_dir()
        if dir_fd is None:
            raise ProbeFileError(f"probe directory {self.directory} cannot be opened")
        now = time.time() if now_wall_s is None else now_wall_s
        return self._load(name, dir_fd, now)

    def close(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def _open_dir(self) -> int | None:
        if self._dir_fd is None:
            try:
                self._dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                log.debug("probe directory %s not available: %s", self.directory, exc)
        return self._dir_fd

    def _list(self, dir_fd: int) -> list[str]:
        """The flight-record names among the first `max_files` entries, sorted."""
        names: list[str] = []
        try:
            with os.scandir(dir_fd) as entries:
                for count, entry in enumerate(entries):
                    if count >= self.limits.max_files:
                        self._refuse("*", f"more than {self.limits.max_files} entries", (0, 0))
                        break
                    if entry.name.endswith(FILE_SUFFIX):
                        names.append(entry.name)
        except OSError as exc:
            log.warning("probe directory %s unreadable: %s", self.directory, exc)
        return sorted(names)

    def _read_entry(self, name: str, dir_fd: int, now: float) -> FlightRecord | None:
        try:
            return self._load(name, dir_fd, now)
        except _Stale:
            self._parsed.pop(name, None)
            return None
        except ProbeFileError as exc:
            self._parsed.pop(name, None)
            version = exc.args[1] if len(exc.args) > 1 else (0, 0)
            self._refuse(name, str(exc.args[0]), version)
            return None

    def _refuse(self, name: str, reason: str, version: tuple[int, int]) -> None:
        key = (name, reason)
        if self._logged.get(key) == version:
            return
        if len(self._logged) > 4096:
            self._logged.clear()
        self._logged[key] = version
        log.warning("probe file %s refused: %s", escape_control(name), escape_control(reason))

    def _load(self, name: str, dir_fd: int, now: float) -> FlightRecord:
        if not _NAME.fullmatch(name):
            raise ProbeFileError("unexpected file name")
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as exc:  # ELOOP: a symlink
            raise ProbeFileError(f"cannot open ({os.strerror(exc.errno or 0)})") from None
        try:
            st = os.fstat(fd)
            version = (st.st_ino, st.st_mtime_ns)
            problem = self._check_stat(st, now)
            if problem == "stale":
                raise _Stale()
            if problem:
                raise ProbeFileError(problem, version)
            key = (st.st_ino, st.st_mtime_ns, st.st_size, st.st_uid)
            cached = self._parsed.get(name)
            # mtime ticks coarsely: only a file idle for a while is known to be unchanged.
            if cached is not None and cached[0] == key and now - st.st_mtime > IDLE_S:
                return cached[1]
            data = _read_capped(fd, self.limits.max_file_bytes)
        finally:
            os.close(fd)
        try:
            record = parse_flight_record(name, data, st.st_mtime, st.st_uid)
        except (RingFormatError, SchemaError) as exc:
            raise ProbeFileError(str(exc), version) from None
        self._parsed[name] = (key, record)
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


class _Stale(Exception):
    """Not refused, just old: skipped without a log line."""


def _read_capped(fd: int, cap: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total <= cap:
        chunk = os.read(fd, min(65536, cap + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > cap:
        raise ProbeFileError(f"grew past the cap of {cap} bytes while being read")
    return b"".join(chunks)


def parse_flight_record(
    name: str, data: bytes, mtime_s: float, owner_uid: int | None = None
) -> FlightRecord:
    """Decode and validate a whole file image (pure; raises RingFormatError/SchemaError)."""
    geometry, meta_payload = decode_header(data)
    meta = meta_from_payload(meta_payload)
    first_event = HEADER_BYTES + geometry.sample_slots * geometry.slot_bytes
    samples = tuple(
        sample_from_payload(payload, seq)
        for seq, payload in decode_slots(
            data, HEADER_BYTES, geometry.sample_slots, geometry.slot_bytes
        )
    )
    events = tuple(
        event_from_payload(payload, seq)
        for seq, payload in decode_slots(
            data, first_event, geometry.event_slots, geometry.slot_bytes
        )
    )
    return FlightRecord(
        name=name, meta=meta, samples=samples, events=events, mtime_s=mtime_s, owner_uid=owner_uid
    )
