"""inotify(7) through the C library the interpreter already runs on.

`ctypes.CDLL(None)` resolves `inotify_init1` and friends in the program's own symbol scope
(libc is linked into it), so nothing looks for a library file: `ctypes.util.find_library`
would import subprocess, tempfile, shutil and random (~2 MiB of the idle agent's RSS) and run
`ldconfig -p` in a child process.  The descriptor is non-blocking; `read()` returns what is
queued now and never waits (the caller polls `fileno()`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import Any, NamedTuple

# Event bits, from the kernel's include/uapi/linux/inotify.h (those the watcher uses, and
# IN_OPEN for the tests that check a file is never opened).
IN_MODIFY = 0x00000002  # file was modified
IN_OPEN = 0x00000020  # file was opened
IN_CREATE = 0x00000100  # subfile was created
IN_DELETE = 0x00000200  # subfile was deleted
IN_Q_OVERFLOW = 0x00004000  # event queue overflowed: events were lost
IN_IGNORED = 0x00008000  # the watch was removed (rm_watch, or the file is gone)
IN_ONLYDIR = 0x01000000  # only watch the path if it is a directory
IN_ISDIR = 0x40000000  # the event's subject is a directory

# `struct inotify_event` (same header): __s32 wd; __u32 mask, cookie, len; char name[len].
# `len` counts the name's NUL padding: fs/notify/inotify/inotify_user.c rounds name + 1 up
# to sizeof(struct inotify_event), so the largest event is 16 + 256 bytes.
_EVENT_HEAD = struct.Struct("=iIII")
_EVENT_MAX_BYTES = _EVENT_HEAD.size + 256
_READ_BYTES = 64 * 1024

_libc = ctypes.CDLL(None, use_errno=True)
_init1 = _libc.inotify_init1
_init1.argtypes = (ctypes.c_int,)
_init1.restype = ctypes.c_int
_add_watch = _libc.inotify_add_watch
_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
_add_watch.restype = ctypes.c_int
_rm_watch = _libc.inotify_rm_watch
_rm_watch.argtypes = (ctypes.c_int, ctypes.c_int)
_rm_watch.restype = ctypes.c_int


class InotifyEvent(NamedTuple):
    wd: int  # the watch descriptor `add_watch` returned
    mask: int  # IN_* bits
    cookie: int  # pairs the two halves of a rename
    name: str  # the entry in a watched directory (os.fsdecode), "" for the watched file itself


def _call(function: Any, *args: object) -> int:
    """A libc call's result; -1 raises OSError with its errno, EINTR is tried again."""
    while True:
        result = int(function(*args))
        if result != -1:
            return result
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))


def parse_events(data: bytes) -> list[InotifyEvent]:
    """The events of one read(2): whole `struct inotify_event`s, each with its padded name."""
    events = []
    pos = 0
    while pos < len(data):
        wd, mask, cookie, name_bytes = _EVENT_HEAD.unpack_from(data, pos)
        pos += _EVENT_HEAD.size
        name = data[pos : pos + name_bytes].split(b"\0", 1)[0]
        pos += name_bytes
        events.append(InotifyEvent(wd, mask, cookie, os.fsdecode(name)))
    return events


class Inotify:
    """One inotify instance (close-on-exec, non-blocking)."""

    def __init__(self) -> None:
        self._fd = _call(_init1, os.O_CLOEXEC | os.O_NONBLOCK)  # IN_CLOEXEC, IN_NONBLOCK

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError("inotify instance is closed")
        return self._fd

    def add_watch(self, path: str | bytes | os.PathLike[str], mask: int) -> int:
        """Watch `path` for the `mask` events; the watch descriptor (the same one again for a
        path already watched)."""
        return _call(_add_watch, self.fileno(), os.fsencode(path), mask)

    def rm_watch(self, wd: int) -> None:
        """Stop a watch; the kernel queues its IN_IGNORED."""
        _call(_rm_watch, self.fileno(), wd)

    def read(self) -> list[InotifyEvent]:
        """The events queued now, none if there are none (it does not wait)."""
        events: list[InotifyEvent] = []
        while True:
            try:
                data = os.read(self.fileno(), _READ_BYTES)
            except BlockingIOError:
                return events
            events += parse_events(data)
            # inotify_read() stops at the first event that does not fit: room left for the
            # largest one means the queue was empty, and another read would only say EAGAIN.
            if len(data) <= _READ_BYTES - _EVENT_MAX_BYTES:
                return events

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
