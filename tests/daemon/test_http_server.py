"""The metrics/health server's bounds: idle and trickling clients cost no thread,
never delay a scrape, and are closed at their deadline; requests are size-capped."""

from __future__ import annotations

import socket
import threading
import urllib.request

from oomwatch.daemon.http_server import LoopServer, health_route


def raw(port: int, data: bytes, timeout_s: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_idle_clients_neither_hold_threads_nor_delay_scrapes() -> None:
    server = LoopServer(
        "127.0.0.1",
        0,
        {"/metrics": lambda: (200, "text/plain", b"m 1\n")},
        max_open=64,
        connection_limit_s=1.0,
    )
    port = server.server_address[1]
    before = threading.active_count()
    try:
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        trickle = socket.create_connection(("127.0.0.1", port))
        trickle.sendall(b"GET /metr")  # a request that never ends
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert r.read() == b"m 1\n"
        # answered while the unfinished request is still open: the scrape did not wait
        # behind it (nor behind the idle ones) for its deadline
        assert server.expired == 0
        assert threading.active_count() == before  # no thread per connection
        assert server.open_connections <= 64 and server.evicted  # the oldest went first
        trickle.settimeout(5)
        assert trickle.recv(10) == b""  # closed at its deadline, not held
        assert server.expired >= 1
        for sock in [*idle, trickle]:
            sock.close()
    finally:
        server.stop_serving()


def test_requests_are_bounded_and_checked() -> None:
    server = LoopServer("127.0.0.1", 0, {"/healthz": health_route(lambda: 1 / 0 == 0)})
    port = server.server_address[1]
    try:
        assert raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
            b"HTTP/1.0 503 Service Unavailable"
        )  # a failing check is unhealthy, not a crash
        head = raw(port, b"HEAD /healthz HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 503") and head.endswith(b"\r\n\r\n")
        assert raw(port, b"POST /healthz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.0 405")
        assert raw(port, b"GET /nope HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.0 404")
        assert raw(port, b"\x16\x03\x01garbage\r\n\r\n").startswith(b"HTTP/1.0 400")
        huge = b"GET /healthz HTTP/1.1\r\n" + b"X-A: " + b"a" * 40_000
        try:
            answer = raw(port, huge)
        except ConnectionResetError:  # closed with our bytes unread: the kernel resets
            answer = b"HTTP/1.0 431"
        assert answer.startswith(b"HTTP/1.0 431")
    finally:
        server.stop_serving()
    assert not [t for t in threading.enumerate() if t.name == "oomwatch-http"]
