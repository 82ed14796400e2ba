"""The agent's small HTTP servers (`/metrics`, `/healthz`): one thread, bounded in every way.

A thread per connection let 600 idle connections hold 603 threads for good, and
any cap on such threads lets a few idle connections starve the scrapes.  So one thread runs
a selector loop instead: it accepts, reads each request without blocking (at most
`MAX_REQUEST_BYTES`), answers it from the routes (all cheap: the registry is in memory) and
writes the reply without blocking.  A connection has `CONNECTION_LIMIT_S` from accept to its
last byte; at most `MAX_OPEN` are open, the oldest closed first.  Idle connections cost a
file descriptor each, no thread and no time, and never delay another client.  The loop
sleeps in `select` until a connection or a deadline comes: an idle agent does not wake for it.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

MAX_OPEN = 256
MAX_REQUEST_BYTES = 16 * 1024
CONNECTION_LIMIT_S = 10.0
LISTEN_BACKLOG = 128

Reply = tuple[int, str, bytes]  # status, content type, body
Routes = Mapping[str, Callable[[], Reply]]


@dataclass(slots=True)
class _Conn:
    deadline_s: float
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytes | None = None  # the reply, once the request is complete
    sent: int = 0


class LoopServer:
    """Serves GET `routes` (path -> reply; 404 for others) on `host:port` from one thread."""

    def __init__(
        self,
        host: str,
        port: int,
        routes: Routes,
        name: str = "oomwatch-http",
        max_open: int = MAX_OPEN,
        connection_limit_s: float = CONNECTION_LIMIT_S,
    ) -> None:
        self._routes = routes
        self._max_open = max_open
        self._limit_s = connection_limit_s
        self._listener = socket.socket(_family(host), socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(LISTEN_BACKLOG)
        except OSError:
            self._listener.close()
            raise
        self._listener.setblocking(False)
        self.server_address = self._listener.getsockname()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._conns: dict[socket.socket, _Conn] = {}  # in accept order: the oldest first
        self.evicted = 0  # connections closed early because MAX_OPEN were open
        self.expired = 0  # connections closed at their deadline
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def stop_serving(self, timeout_s: float = 5.0) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")
        self._thread.join(timeout_s)

    # --- the loop ---

    def _run(self) -> None:
        try:
            while not self._stopping:
                for key, events in self._selector.select(self._timeout()):
                    sock = key.fileobj
                    if sock is self._listener:
                        self._accept()
                    elif sock is not self._wake_r:
                        assert isinstance(sock, socket.socket)
                        self._serve(sock, events)
                self._expire(time.monotonic())
        finally:
            for sock in list(self._conns):
                self._close(sock)
            self._selector.close()
            for sock in (self._listener, self._wake_r, self._wake_w):
                sock.close()

    def _timeout(self) -> float | None:
        if not self._conns:
            return None  # asleep until a connection (or stop_serving) comes
        first = min(c.deadline_s for c in self._conns.values())
        return max(0.0, first - time.monotonic())

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE and the like: try again on the next wake-up
                return
            if len(self._conns) >= self._max_open:
                self._close(next(iter(self._conns)))
                self.evicted += 1
            sock.setblocking(False)
            self._conns[sock] = _Conn(time.monotonic() + self._limit_s)
            self._selector.register(sock, selectors.EVENT_READ)

    def _serve(self, sock: socket.socket, events: int) -> None:
        conn = self._conns.get(sock)
        if conn is None:
            return
        try:
            if conn.outbox is None and events & selectors.EVENT_READ:
                self._read(sock, conn)
            elif conn.outbox is not None and events & selectors.EVENT_WRITE:
                self._write(sock, conn)
        except OSError:
            self._close(sock)

    def _read(self, sock: socket.socket, conn: _Conn) -> None:
        data = sock.recv(4096)
        if not data:
            self._close(sock)
            return
        conn.inbox += data
        head_end = conn.inbox.find(b"\r\n\r\n")
        if head_end < 0:
            if len(conn.inbox) > MAX_REQUEST_BYTES:
                self._reply(sock, conn, _error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE))
            return
        parts = bytes(conn.inbox[: conn.inbox.find(b"\r\n")]).split()
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            self._reply(sock, conn, _error(HTTPStatus.BAD_REQUEST))
        elif parts[0] not in (b"GET", b"HEAD"):
            self._reply(sock, conn, _error(HTTPStatus.METHOD_NOT_ALLOWED))
        else:
            path = parts[1].split(b"?", 1)[0].decode("latin-1")
            route = self._routes.get(path)
            reply = route() if route else _error(HTTPStatus.NOT_FOUND)
            self._reply(sock, conn, reply, head_only=parts[0] == b"HEAD")

    def _reply(
        self, sock: socket.socket, conn: _Conn, reply: Reply, head_only: bool = False
    ) -> None:
        status, content_type, body = reply
        head = (
            f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode("latin-1")
        conn.outbox = head if head_only else head + body
        self._selector.modify(sock, selectors.EVENT_WRITE)
        self._write(sock, conn)

    def _write(self, sock: socket.socket, conn: _Conn) -> None:
        assert conn.outbox is not None
        try:
            conn.sent += sock.send(conn.outbox[conn.sent :])
        except (BlockingIOError, InterruptedError):
            return
        if conn.sent >= len(conn.outbox):
            self._close(sock)

    def _expire(self, now: float) -> None:
        for sock, conn in list(self._conns.items()):
            if conn.deadline_s <= now:
                self._close(sock)
                self.expired += 1

    def _close(self, sock: socket.socket) -> None:
        self._conns.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        with contextlib.suppress(OSError):
            sock.close()


def _error(status: HTTPStatus) -> Reply:
    return int(status), "text/plain", f"{status.phrase.lower()}\n".encode()


def _family(host: str) -> socket.AddressFamily:
    """An IPv6 host (`::`, `::1`, a name only IPv6 resolves) needs an AF_INET6 socket.

    An ASCII host goes as bytes: getaddrinfo encodes a str with the idna codec (CPython's
    Modules/socketmodule.c, socket_getaddrinfo), which leaves ASCII as it is but imports
    unicodedata and stringprep, ~0.4 MiB of the idle agent's RSS."""
    name = host.encode("ascii") if host.isascii() else host
    try:
        return socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, IndexError):
        return socket.AF_INET  # bind() reports the bad host, naming it


def serve(host: str, port: int, routes: Routes, name: str = "oomwatch-http") -> LoopServer:
    """Serve `routes` from a thread named `name` (see LoopServer)."""
    return LoopServer(host, port, routes, name)


def health_route(health: Callable[[], bool]) -> Callable[[], Reply]:
    """`/healthz`: 200 while `health()` says so; a failing check is 503, never a crash."""

    def reply() -> Reply:
        try:
            ok = bool(health())
        except Exception:
            ok = False
        return (200, "text/plain", b"ok\n") if ok else (503, "text/plain", b"unhealthy\n")

    return reply
