"""The privileged half of the split-privilege DaemonSet: copy /dev/kmsg records into a FIFO.

Only this process opens /dev/kmsg (which needs a privileged container); the agent, running
unprivileged, reads the FIFO with `oomwatch run --kmsg <fifo>`.  Each record is written
whole and unchanged (`<prio>,<seq>,<usec>,<flags>;<message>\n`, then dictionary lines that
start with a space): the kernel escapes newlines inside messages, so a line that does not
start with a space always begins a record.  Nothing is parsed here, so nothing untrusted
runs with privilege.  The relay holds the FIFO open read-write, so the pipe (and the records
in it) outlives a restart of the agent: with no reader the relay's writes fill the pipe and
then block, and the kernel ring holds the rest until the agent reads again.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from collections.abc import Callable, Iterator

RECORD_MAX_BYTES = 8192  # one read() of /dev/kmsg returns one record, at most this long


def read_records(kmsg_fd: int, on_lost: Callable[[], None]) -> Iterator[bytes]:
    """Blocking records from an open /dev/kmsg; EPIPE (records overwritten) is reported."""
    while True:
        try:
            record = os.read(kmsg_fd, RECORD_MAX_BYTES)
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                on_lost()
                continue
            if exc.errno == errno.EINTR:
                continue
            raise
        if not record:
            return
        yield record


def ensure_fifo(path: str) -> None:
    """Create the FIFO unless a FIFO is already there.

    Mode 0666: the agent runs as another user and opens it read-write (so it never sees a
    hang-up while the relay restarts); the emptyDir holding it is private to the pod.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        os.mkfifo(path, 0o666)
        os.chmod(path, 0o666)  # mkfifo honours the umask
        return
    if not stat.S_ISFIFO(mode):
        raise SystemExit(f"kmsg-relay: {path} exists and is not a FIFO")


def relay(records: Iterator[bytes], fifo_path: str) -> None:
    """Write every record whole to the FIFO, blocking while the pipe is full.

    Opened read-write (never read): a write-only end would get EPIPE when the agent
    restarts, and closing it would free the pipe with up to 64 KiB of unread records.
    """
    out = os.open(fifo_path, os.O_RDWR | os.O_CLOEXEC)
    try:
        for record in records:
            view = memoryview(record)
            while view:
                view = view[os.write(out, view) :]
    finally:
        os.close(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="oomwatch-kmsg-relay",
        description="Copy /dev/kmsg records into a FIFO for the unprivileged oomwatch agent.",
    )
    parser.add_argument("--kmsg", default="/dev/kmsg", help="kernel log device")
    parser.add_argument("--fifo", required=True, help="FIFO the agent reads (--kmsg of run)")
    args = parser.parse_args(argv)
    ensure_fifo(args.fifo)
    lost = 0

    def on_lost() -> None:
        nonlocal lost
        lost += 1
        print(
            f"kmsg-relay: kernel log records overwritten before read ({lost} times)",
            file=sys.stderr,
            flush=True,
        )

    try:
        kmsg_fd = os.open(args.kmsg, os.O_RDONLY)
    except OSError as exc:
        print(f"kmsg-relay: cannot open {args.kmsg}: {exc.strerror}", file=sys.stderr)
        return 1
    try:
        relay(read_records(kmsg_fd, on_lost), args.fifo)
    except KeyboardInterrupt:
        return 0
    finally:
        os.close(kmsg_fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
