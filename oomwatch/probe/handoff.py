"""Ring files handed to the agent as open descriptors, so they can stay 0600.

The agent runs as another uid with no capabilities, so it cannot open a trainer's 0600 file
by path.  File modes are checked when a file is opened, not when a descriptor is read, so
the probe (the file's owner) opens it read-only and passes that descriptor over a Unix
socket (`SCM_RIGHTS`) in its own pod directory: `<stem>.sock` beside `<stem>.ring`, 0660 in
the setgid directory whose group is the agent's.  The probe listens and the agent connects,
not the other way round: an agent restarted (or started after the trainer) just connects
again, a pod cannot push descriptors at the agent, and every wait is the agent's to bound.

The agent keeps the descriptors it received (`HeldRings`), because the file matters most
after its writer died (the kernel killed it) and a dead probe answers nothing; it connects
again only when the socket file is replaced (the container restarted: the new probe sends
its new file and the previous run's `.prev.ring`).  Identity is the pod directory the
socket is in, as for files read by path.  Everything a socket sends is hostile: at most
`MAX_FDS` descriptors (a bounded ancillary buffer; more arrive as `MSG_CTRUNC`, and the
kernel closes the rest), each a regular file on the probe directory's filesystem owned by
the peer (`SO_PEERCRED`), which must also own the socket; one short wait, capped by the
walk's deadline, and a socket that let it pass is not asked again for `RETRY_S`.
"""

from __future__ import annotations

import array
import contextlib
import errno
import logging
import os
import re
import secrets
import socket
import stat
import struct
import threading
from dataclasses import dataclass

from oomwatch.probe.no_follow import ProbeFileError, Skip
from oomwatch.probe.ring import FILE_SUFFIX

log = logging.getLogger("oomwatch.probe.handoff")

SOCKET_SUFFIX = ".sock"
SOCKET_MODE = 0o660  # the owner and the directory's group (the agent's, where setgid)
MAGIC = b"OOMWFD1\n"
MAX_FDS = 4  # a probe sends two: its ring file and the previous run's
MESSAGE_BYTES = 1024
SOCKET_TIMEOUT_S = 0.05  # a live probe answers in microseconds; a busy trainer in ~10 ms
RETRY_S = 60.0  # a socket that did not answer is asked again after this
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,250}")
SOCKET_NAME = re.compile(_NAME.pattern + re.escape(SOCKET_SUFFIX))
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


def socket_stem(socket_name: str) -> str:
    return socket_name[: -len(SOCKET_SUFFIX)]


def covered(ring_name: str, stems: set[str]) -> bool:
    """Whether a ring file comes through a socket of its directory (`<stem>.` prefix)."""
    return ring_name.endswith(FILE_SUFFIX) and any(ring_name.startswith(s + ".") for s in stems)


class RingServer:
    """The probe's side: answers each connection on `<directory>/<stem>.sock` with read-only
    descriptors of `paths` (those that exist) and their names, on a daemon thread."""

    def __init__(self, directory: str, stem: str, paths: list[str]) -> None:
        self._fds: list[int] = []
        names: list[str] = []
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            self._fds.append(fd)
            names.append(os.path.basename(path))
        self._message = MAGIC + "\n".join(names).encode()
        self.path = os.path.join(directory, stem + SOCKET_SUFFIX)
        # Bound and made connectable under a private name, then renamed: the visible socket
        # always has a listener, and replaces the previous run's.  Bound through the
        # directory's descriptor: a socket's path has room for 107 bytes, which a pod UID, a
        # container name and the probe directory's path can pass.
        tmp = f".{secrets.token_hex(8)}{SOCKET_SUFFIX}.tmp"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._sock.bind(f"/proc/self/fd/{dir_fd}/{tmp}")
            os.chmod(tmp, SOCKET_MODE, dir_fd=dir_fd)
            self._sock.listen(16)
            os.replace(tmp, os.path.basename(self.path), src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            self.close()
            raise
        finally:
            os.close(dir_fd)
        self._thread = threading.Thread(target=self._serve, name="oomwatch-probe-fds", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed by close()
                return
            with conn:
                try:
                    conn.settimeout(1.0)
                    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", self._fds))]
                    conn.sendmsg([self._message], rights)
                except OSError:
                    pass  # the agent went away; the next connection is answered the same

    def close(self) -> None:
        """Stop answering (the socket file stays: the agent keeps what it received)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes accept() on Linux
        self._sock.close()
        for fd in self._fds:
            os.close(fd)
        self._fds = []


class SocketGone(Exception):
    """No probe listens on the socket (it exited, or was killed)."""


def receive_rings(dir_fd: int, name: str, timeout_s: float) -> list[tuple[str, int]]:
    """Connect to the socket `name` in `dir_fd` and take its ring descriptors (name, fd).

    Raises SocketGone, Skip (the name is gone) or ProbeFileError (refused: every descriptor
    received is closed again)."""
    sock_st, peer_uid, message, fds = _exchange(dir_fd, name, timeout_s)
    try:
        dir_dev = os.fstat(dir_fd).st_dev
        if peer_uid != sock_st.st_uid:
            raise ProbeFileError(f"listener uid {peer_uid} does not own the socket")
        if not message.startswith(MAGIC):
            raise ProbeFileError("not a probe's answer")
        names = message[len(MAGIC) :].decode("ascii", "replace").split("\n")
        names = [n for n in names if n]
        if len(names) != len(fds) or len(set(names)) != len(names):
            raise ProbeFileError(f"{len(fds)} descriptors for {len(names)} distinct names")
        stem = socket_stem(name)
        for file_name, fd in zip(names, fds, strict=True):
            if not (
                _NAME.fullmatch(file_name)
                and file_name.endswith(FILE_SUFFIX)
                and covered(file_name, {stem})
            ):
                raise ProbeFileError("a descriptor under an unexpected name")
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ProbeFileError("a descriptor of something not a regular file")
            if st.st_dev != dir_dev:
                raise ProbeFileError("a descriptor of a file outside the probe directory")
            if st.st_uid != peer_uid:
                raise ProbeFileError(f"a descriptor of a file of uid {st.st_uid}, not the peer's")
        return list(zip(names, fds, strict=True))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _exchange(
    dir_fd: int, name: str, timeout_s: float
) -> tuple[os.stat_result, int, bytes, list[int]]:
    """The socket's stat, its peer's uid, the message and the descriptors received."""
    try:  # O_PATH|O_NOFOLLOW: a planted symlink to some other socket is never connected to
        path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise Skip("gone") from None
        raise ProbeFileError(f"cannot open ({os.strerror(exc.errno or 0)})") from None
    try:
        sock_st = os.fstat(path_fd)
        if not stat.S_ISSOCK(sock_st.st_mode):
            raise ProbeFileError("not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(timeout_s)
            try:
                sock.connect(f"/proc/self/fd/{path_fd}")
                peer_uid = _PEERCRED.unpack(
                    sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
                )[1]
                message, ancillary, flags, _ = sock.recvmsg(
                    MESSAGE_BYTES, socket.CMSG_SPACE(MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC
                )
            except (ConnectionRefusedError, FileNotFoundError):
                raise SocketGone() from None
            except TimeoutError:
                raise ProbeFileError(f"no answer within {timeout_s:.3f} s") from None
            except OSError as exc:
                raise ProbeFileError(f"cannot connect ({os.strerror(exc.errno or 0)})") from None
    finally:
        os.close(path_fd)
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", data[: len(data) - len(data) % 4]))
    if flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise ProbeFileError(f"more than {MAX_FDS} descriptors sent")
    return sock_st, peer_uid, message, fds


@dataclass(slots=True)
class _Held:
    ident: tuple[int, int]  # the socket file's device and inode
    files: list[tuple[str, int]]


class HeldRings:
    """The descriptors the agent holds, by socket name (`pod dir/stem.sock`): at most
    `max_fds` together, each closed when its socket is replaced, or not seen for a whole
    walk cycle (`release_except`)."""

    def __init__(self, max_fds: int) -> None:
        self.max_fds = max_fds
        self._held: dict[str, _Held] = {}
        self._failed: dict[str, tuple[tuple[int, int], float]] = {}
        self.held_fds = 0

    def files(
        self, pod_fd: int, name: str, timeout_s: float, now_s: float
    ) -> list[tuple[str, int]] | None:
        """The descriptors for socket `name` (`pod_fd`: its directory): held, or received now;
        None when no probe listens and none are held (the caller reads by path)."""
        base = name.rpartition("/")[2]
        try:
            st = os.stat(base, dir_fd=pod_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise Skip("gone") from None
        ident = (st.st_dev, st.st_ino)
        held = self._held.get(name)
        if held is not None and held.ident == ident:
            return held.files
        failed = self._failed.get(name)
        if failed is not None and failed[0] == ident and now_s < failed[1]:
            raise Skip("did not answer lately")
        if self.held_fds - (len(held.files) if held else 0) + MAX_FDS > self.max_fds:
            raise ProbeFileError(f"{self.held_fds} descriptors held already")
        try:
            files = receive_rings(pod_fd, base, timeout_s)
        except SocketGone:
            return held.files if held is not None else None
        except ProbeFileError:
            if len(self._failed) >= 4096:
                self._failed.clear()
            self._failed[name] = (ident, now_s + RETRY_S)
            raise
        self.release(name)
        self._held[name] = _Held(ident, files)
        self.held_fds += len(files)
        return files

    def release(self, name: str) -> None:
        held = self._held.pop(name, None)
        if held is not None:
            for _, fd in held.files:
                os.close(fd)
            self.held_fds -= len(held.files)

    def release_except(self, names: set[str]) -> None:
        for name in set(self._held) - names:
            self.release(name)

    def close(self) -> None:
        self.release_except(set())
