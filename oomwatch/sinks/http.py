"""The agent's small HTTP servers (`/metrics`, `/healthz`), bounded in threads and in time.

A connection gets a handler thread only while fewer than `MAX_HANDLERS` are busy; past that
it is closed at once (a scraper retries on its next interval).  Every socket read and write
times out after `IO_TIMEOUT_S`, and a reaper shuts any connection down `CONNECTION_LIMIT_S`
after it was accepted, so a client that trickles bytes holds a thread for seconds, not
forever (600 idle connections held 603 threads for good: issue 14).  The accept loop blocks
until a connection comes, and the reaper sleeps while none is open: an idle agent does not
wake for its servers.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_HANDLERS = 8
IO_TIMEOUT_S = 5.0
CONNECTION_LIMIT_S = 10.0

Reply = tuple[int, str, bytes]  # status, content type, body
Routes = Mapping[str, Callable[[], Reply]]


class _Reaper:
    """Shuts down connections that outlive their deadline (one thread, asleep when idle)."""

    def __init__(self, limit_s: float) -> None:
        self._limit_s = limit_s
        self._cond = threading.Condition()
        self._open: dict[socket.socket, float] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, sock: socket.socket) -> None:
        with self._cond:
            self._open[sock] = time.monotonic() + self._limit_s
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="oomwatch-http-reaper")
                self._thread.daemon = True
                self._thread.start()
            self._cond.notify()

    def remove(self, sock: socket.socket) -> None:
        with self._cond:
            self._open.pop(sock, None)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if not self._open:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                for sock, deadline in list(self._open.items()):
                    if deadline <= now:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                        del self._open[sock]
                if self._open:
                    self._cond.wait(max(0.05, min(self._open.values()) - now))


class BoundedHTTPServer(ThreadingHTTPServer):
    """A threading server with a cap on handler threads and a deadline on connections.

    Accepts on its own thread, asleep until a connection comes; `stop_serving()` wakes it
    with one connection of its own.
    """

    daemon_threads = True
    thread_name = "oomwatch-http"
    _thread: threading.Thread | None = None
    _stopping = False

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 max_handlers: int = MAX_HANDLERS,
                 connection_limit_s: float = CONNECTION_LIMIT_S) -> None:  # fmt: skip
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_handlers)
        self._reaper = _Reaper(connection_limit_s)
        self.refused = 0  # connections closed at once: every handler was busy

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            self._reaper.add(request)
            super().process_request(request, client_address)
        except BaseException:
            self._reaper.remove(request)
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._reaper.remove(request)
            self._slots.release()

    def start_serving(self) -> None:
        self._thread = threading.Thread(target=self._accept_loop, name=self.thread_name)
        self._thread.daemon = True
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._stopping:
            self.handle_request()  # no timeout set: blocks until a connection

    def stop_serving(self, timeout_s: float = 5.0) -> None:
        self._stopping = True
        host, port = self.server_address[:2]
        wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1"}
        with contextlib.suppress(OSError):
            socket.create_connection((wildcard.get(str(host), str(host)), port), 1.0).close()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._reaper.stop()
        self.server_close()


class _IPv6Server(BoundedHTTPServer):
    address_family = socket.AF_INET6


def _server_class(host: str) -> type[BoundedHTTPServer]:
    """An IPv6 host (`::`, `::1`, a name only IPv6 resolves) needs an AF_INET6 socket."""
    try:
        family = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, IndexError):
        return BoundedHTTPServer  # bind() reports the bad host, naming it
    return _IPv6Server if family == socket.AF_INET6 else BoundedHTTPServer


def serve(
    host: str, port: int, routes: Routes, name: str = "oomwatch-http", **bounds: Any
) -> BoundedHTTPServer:
    """Serve GET `routes` (path -> reply) from a thread named `name`; 404 for other paths."""

    class Handler(BaseHTTPRequestHandler):
        timeout = IO_TIMEOUT_S  # every read and write of the socket

        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            status, content_type, body = route() if route else (404, "text/plain", b"not found\n")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Silence per-request stderr lines: stdout/stderr carry the incident log."""

    server = _server_class(host)((host, port), Handler, **bounds)
    server.thread_name = name
    server.start_serving()
    return server


def health_route(health: Callable[[], bool]) -> Callable[[], Reply]:
    """`/healthz`: 200 while `health()` says so; a failing check is 503, never a crash."""

    def reply() -> Reply:
        try:
            ok = bool(health())
        except Exception:
            ok = False
        return (200, "text/plain", b"ok\n") if ok else (503, "text/plain", b"unhealthy\n")

    return reply
