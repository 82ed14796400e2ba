"""The fake API server's request handler base: the server it answers for, and how it writes
JSON, `Status` failures and chunked watch streams, as kube-apiserver does."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from support.fakeapi.server import FakeApiServer


class ApiHttpServer(ThreadingHTTPServer):
    """The listening socket; `api` is the cluster state its handlers serve."""

    def __init__(
        self, address: tuple[str, int], handler: type[ApiHandler], api: FakeApiServer
    ) -> None:
        super().__init__(address, handler)
        self.api = api


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes
    server: ApiHttpServer

    @property
    def api(self) -> FakeApiServer:
        return self.server.api

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _wants_table(self) -> bool:
        return "as=Table" in (self.headers.get("Accept") or "")

    # --- wire helpers ------------------------------------------------------------------
    def _merge_patch_only(self) -> bool:
        """Whether the body is a JSON merge patch, the one kind served (else 415 answered)."""
        if self.headers.get("Content-Type") == "application/merge-patch+json":
            return True
        self._status(415, "UnsupportedMediaType", "expected a merge patch")
        return False

    def _list(self, kind: str, api_version: str, items: list[Any], meta: dict[str, Any]) -> None:
        self._json(200, {"kind": kind, "apiVersion": api_version, "metadata": meta, "items": items})

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._json(
            code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": reason,
                "message": message,
                "code": code,
            },
        )

    def _chunk(self, obj: Any) -> None:
        data = json.dumps(obj).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_chunks(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _selector(text: str) -> dict[str, str]:
    """`a=b,c==d` (equality only, as oomwatch and the plugin ask)."""
    pairs = (part.replace("==", "=").partition("=") for part in text.split(",") if part)
    return {k.strip(): v.strip() for k, _, v in pairs}


def _field(obj: dict[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _gone() -> dict[str, Any]:
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": "too old resource version",
            "reason": "Expired",
            "code": 410,
        },
    }
