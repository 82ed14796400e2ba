"""Opening a name in the probe directory, which any pod may have swapped for anything.

Nothing here follows a link or opens a driver: a directory is opened `O_NOFOLLOW`, a file by
`O_PATH` first (which resolves the name without any driver's open), compared with the inode
that was checked, and only then read through `/proc/self/fd`, at most `cap` bytes.
"""

from __future__ import annotations

import errno
import os
import stat


class ProbeFileError(ValueError):
    """Why a file was refused (the message is logged with the escaped file name)."""


class Skip(Exception):
    """Not refused, just not there to read (stale, or gone since the listing)."""


def open_pod_dir(dir_fd: int, pod_dir: str) -> int:
    try:
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(pod_dir, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise Skip("gone") from None
        raise ProbeFileError(f"cannot open its directory ({os.strerror(exc.errno or 0)})") from None


def read_regular(
    name: str, dir_fd: int, st: os.stat_result, cap: int, version: tuple[int, int]
) -> bytes:
    """The bytes of the regular file `st` describes, without ever opening anything else.

    `O_PATH` resolves the name without calling any driver's open; the inode is compared with
    the one checked; `/proc/self/fd/N` then opens exactly that inode for reading.
    """
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        path_fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:  # ELOOP: swapped for a symlink
        raise ProbeFileError(f"cannot open ({os.strerror(exc.errno or 0)})", version) from None
    try:
        now_st = os.fstat(path_fd)
        if (now_st.st_dev, now_st.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(
            now_st.st_mode
        ):
            raise ProbeFileError("replaced while being opened", version)
        read_flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        try:
            fd = os.open(f"/proc/self/fd/{path_fd}", read_flags)
        except OSError as exc:
            raise ProbeFileError(f"cannot open ({os.strerror(exc.errno or 0)})", version) from None
    finally:
        os.close(path_fd)
    try:
        return read_capped(fd, cap)
    finally:
        os.close(fd)


def read_capped(fd: int, cap: int, *, from_start: bool = False) -> bytes:
    """At most `cap` bytes of `fd`, refused when it holds more.  `from_start`: read with
    `pread` from offset 0, for a descriptor received from its opener (whose offset it shares)."""
    chunks: list[bytes] = []
    total = 0
    while total <= cap:
        want = min(65536, cap + 1 - total)
        chunk = os.pread(fd, want, total) if from_start else os.read(fd, want)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > cap:
        raise ProbeFileError(f"grew past the cap of {cap} bytes while being read")
    return b"".join(chunks)
