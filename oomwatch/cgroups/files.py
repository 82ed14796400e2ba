"""Cheap, repeated reads of small cgroupfs files, and parsers for the few keys we need.

The sampler reads a few files per container every second, so a file is opened once and
re-read with `pread` at offset 0 (kernfs regenerates the content on every read from offset
0): several times cheaper than open/read/close.  A file
of a removed cgroup fails with ENOENT or ENODEV: that is how "the cgroup is gone" shows.
"""

from __future__ import annotations

import errno
import os

_READ_ONCE_BYTES = 1 << 20  # cgroup.procs of a busy cgroup can be long
_GONE_ERRNOS = frozenset({errno.ENOENT, errno.ENODEV, errno.ENOTDIR, errno.ESRCH})

# v1 prints "no limit" as PAGE_COUNTER_MAX pages rounded to the page size; anything this large
# is not a limit anyone set.
UNLIMITED_THRESHOLD_BYTES = 1 << 62


class CgroupGone(Exception):
    """The cgroup (or the file) no longer exists."""


class CgroupFile:
    """One cgroupfs file kept open and re-read in place with `pread` at offset 0.

    `CgroupFile(directory, size, name=...)` keeps the cgroup's directory string (shared with
    its `WatchedCgroup`) and a constant file name instead of a path of its own: three files
    of each of a thousand containers held ~0.9 KiB of path copies each.
    """

    __slots__ = ("_dir", "_fd", "_name", "_size")

    def __init__(self, path: str, size_bytes: int = 4096, name: str = "") -> None:
        """`path`: the file, or with `name` the directory that holds it."""
        self._dir = path
        self._name = name
        self._size = size_bytes  # a first guess; a file that fills it is read again, doubled
        self._fd: int | None = None

    @property
    def path(self) -> str:
        return f"{self._dir}/{self._name}" if self._name else self._dir

    def read(self) -> bytes:
        """The whole file content; raises `CgroupGone` when the cgroup was removed."""
        try:
            if self._fd is None:
                self._fd = _open_or_none(self.path)
            if self._fd is None:  # out of descriptors: read without keeping one
                return read_once(self.path)
            data = os.pread(self._fd, self._size, 0)
            while len(data) == self._size:  # bigger than expected: grow and read again
                self._size *= 2
                data = os.pread(self._fd, self._size, 0)
            return data
        except OSError as exc:
            if exc.errno in _GONE_ERRNOS:
                self.close()
                raise CgroupGone(self.path) from exc
            raise

    def close(self) -> None:
        """Release the descriptor (an open file pins a removed memcg in the kernel)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _open_or_none(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            return None
        raise


def read_once(path: str) -> bytes:
    """Read a small cgroupfs file once; raises `CgroupGone` if it does not exist."""
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read(_READ_ONCE_BYTES)
    except OSError as exc:
        if exc.errno in _GONE_ERRNOS:
            raise CgroupGone(path) from exc
        raise


def keyed_value(data: bytes, key: bytes) -> int | None:
    """The integer after `key ` in a flat-keyed file (`memory.stat`, `memory.events`).

    Anchored at line starts so `rss` never matches `total_rss` or `rss_huge`.
    """
    needle = key + b" "
    if data.startswith(needle):
        start = len(needle)
    else:
        pos = data.find(b"\n" + needle)
        if pos < 0:
            return None
        start = pos + 1 + len(needle)
    end = data.find(b"\n", start)
    try:
        return int(data[start:] if end < 0 else data[start:end])
    except ValueError:
        return None


def parse_limit_bytes(data: bytes) -> int | None:
    """A memory limit file (v1 `memory.limit_in_bytes`, v2 `memory.max`); None = unlimited."""
    text = data.strip()
    if text == b"max" or not text:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= UNLIMITED_THRESHOLD_BYTES else value


def parse_int(data: bytes) -> int | None:
    """A single-integer file (`memory.current`, `memory.usage_in_bytes`)."""
    try:
        return int(data)
    except ValueError:
        return None


def read_oom_group(path: str, version: int) -> bool | None:
    """`memory.oom.group` of the cgroup directory `path` (v1 never); None if it is gone."""
    if version == 1:
        return False
    try:
        return read_once(os.path.join(path, "memory.oom.group")).strip() == b"1"
    except CgroupGone:
        return None if not os.path.isdir(path) else False
