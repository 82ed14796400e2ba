"""A local stand-in for the Kubernetes API server, for the unmodified official client.

Serves what oomwatch uses, the way kube-apiserver answers it: pod list with a
resourceVersion, chunked watch streams (with bookmarks and `410 Gone` once the history is
compacted), events.k8s.io/v1 create and merge-patch with the API server's validation of
new-style Events, pod get and merge-patch.  Tests can fail requests (`fail_next`), answer
503 for a while (`unavailable`), or take the server off the network (`go_down`/`come_back`).
Every request is recorded as (verb, apiGroup, resource) for the RBAC test.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fakeapi_objects import NODE, make_pod, merge_patch, validate_new_event

__all__ = ["ALL_REQUESTS", "NODE", "FakeApiServer", "make_pod"]

Verb = tuple[str, str, str]  # (verb, apiGroup, resource)

ALL_REQUESTS: set[Verb] = set()
"""Every (verb, group, resource) any FakeApiServer saw in this test session."""

_POD = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")
_EVENTS = re.compile(
    r"^/apis/events\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/events(?:/(?P<name>[^/]+))?$"
)


class FakeApiServer:
    """One in-memory cluster; `url` is what a kubeconfig's `server:` points at."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, str, str]] = []  # verb, group, resource, path
        self.watch_versions: list[str] = []  # resourceVersion each watch asked to start from
        self.authorizations: set[tuple[str, str]] = set()  # (verb, Authorization header)
        self.event_writes: list[tuple[str, dict[str, Any]]] = []  # ("create"|"patch", body)
        self.fail_next: list[tuple[str, int]] = []  # (verb, status) answered once each
        self.unavailable = False
        self._rv = 1000
        self._history: list[tuple[int, str, dict[str, Any]]] = []
        self._oldest_rv = 0
        self._generation = 0  # bumped by compact()/go_down(): open watches end
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeApiServer:
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.go_down()

    def go_down(self) -> None:
        """Close the listening socket and end open watches: connections are refused."""
        with self.lock:
            self._generation += 1
            self.lock.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def come_back(self) -> None:
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- cluster state ---------------------------------------------------------------------
    def put_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Create or replace a pod (ADDED / MODIFIED on the watch)."""
        with self.lock:
            meta = pod.setdefault("metadata", {})
            key = (meta["namespace"], meta["name"])
            kind = "MODIFIED" if key in self.pods else "ADDED"
            stored = self._store_pod(key, pod)
            self._record(kind, stored)
            return copy.deepcopy(stored)

    def delete_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            pod = self.pods.pop((namespace, name))
            self._rv += 1
            pod["metadata"]["resourceVersion"] = str(self._rv)
            self._record("DELETED", pod)

    def compact(self) -> None:
        """Forget the watch history: open watches get `410 Gone`, as after etcd compaction."""
        with self.lock:
            self._oldest_rv = self._rv + 1
            self._history.clear()
            self._generation += 1
            self.lock.notify_all()

    def seen(self) -> set[Verb]:
        with self.lock:
            return {(v, g, r) for v, g, r, _ in self.requests}

    def wait_for(self, predicate: Any, timeout_s: float = 10.0) -> Any:
        """Wait until `predicate(self)` is truthy; returns its value (or fails the test)."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while True:
                value = predicate(self)
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"fake API: condition not met in {timeout_s}s")
                self.lock.wait(min(left, 0.1))

    def _store_pod(self, key: tuple[str, str], pod: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        stored = copy.deepcopy(pod)
        stored["metadata"]["resourceVersion"] = str(self._rv)
        stored["metadata"].setdefault("uid", str(uuid.uuid4()))
        stored.setdefault("apiVersion", "v1")
        stored.setdefault("kind", "Pod")
        self.pods[key] = stored
        return stored

    def _record(self, kind: str, obj: dict[str, Any]) -> None:
        self._history.append((self._rv, kind, copy.deepcopy(obj)))
        self.lock.notify_all()


def _make_handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are separate writes

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PATCH(self) -> None:
            self._dispatch("PATCH")

        # --- routing -----------------------------------------------------------------------
        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null") if length else None
            if api._server is None:  # "down": a pooled keep-alive connection is reset too
                self.close_connection = True
                return
            route = self._route(method, url.path, query)
            if route is None:
                self._status(404, "NotFound", f"no route for {method} {url.path}")
                return
            verb, group, resource = route
            with api.lock:
                api.requests.append((verb, group, resource, url.path))
                api.authorizations.add((verb, self.headers.get("Authorization") or ""))
                ALL_REQUESTS.add((verb, group, resource))
                failure = next((f for f in api.fail_next if f[0] == verb), None)
                if failure is not None:
                    api.fail_next.remove(failure)
                api.lock.notify_all()
            if api.unavailable:
                self._status(503, "ServiceUnavailable", "the server is currently unavailable")
                return
            if failure is not None:
                self._status(failure[1], "InjectedFailure", f"injected {failure[1]}")
                return
            getattr(self, f"_{verb}_{resource.replace('/', '_')}")(url.path, query, body)

        def _route(self, method: str, path: str, query: dict[str, str]) -> Verb | None:
            if path == "/api/v1/pods" and method == "GET":
                watching = query.get("watch") in ("true", "1", "True")
                return ("watch" if watching else "list", "", "pods")
            if _POD.match(path):
                verb = {"GET": "get", "PATCH": "patch"}.get(method)
                return (verb, "", "pods") if verb else None
            events = _EVENTS.match(path)
            if events:
                if method == "POST" and not events.group("name"):
                    return ("create", "events.k8s.io", "events")
                if method == "PATCH" and events.group("name"):
                    return ("patch", "events.k8s.io", "events")
            return None

        # --- pods --------------------------------------------------------------------------
        def _node_pods(self, query: dict[str, str]) -> list[dict[str, Any]]:
            selector = query.get("fieldSelector", "")
            node = selector.removeprefix("spec.nodeName=") if selector else None
            return [
                p for p in api.pods.values() if node is None or p["spec"].get("nodeName") == node
            ]

        def _list_pods(self, path: str, query: dict[str, str], body: Any) -> None:
            with api.lock:
                items = copy.deepcopy(self._node_pods(query))
                rv = str(api._rv)
            self._json(200, {"kind": "PodList", "apiVersion": "v1",
                             "metadata": {"resourceVersion": rv}, "items": items})

        def _watch_pods(self, path: str, query: dict[str, str], body: Any) -> None:
            since = int(query.get("resourceVersion") or 0)
            with api.lock:
                api.watch_versions.append(query.get("resourceVersion") or "")
            bookmarks = query.get("allowWatchBookmarks") == "true"
            timeout_s = float(query.get("timeoutSeconds") or 1800)
            selector = query.get("fieldSelector", "")
            node = selector.removeprefix("spec.nodeName=") if selector else None
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            deadline = time.monotonic() + timeout_s
            with api.lock:
                generation = api._generation
            try:
                if since < api._oldest_rv:
                    self._chunk(_gone())
                    return
                while time.monotonic() < deadline:
                    with api.lock:
                        if api._generation != generation:
                            if api._oldest_rv > since:
                                self._chunk(_gone())
                            return
                        fresh = [(rv, k, o) for rv, k, o in api._history if rv > since]
                        if not fresh:
                            api.lock.wait(min(0.2, deadline - time.monotonic()))
                            continue
                    for rv, kind, obj in fresh:
                        since = rv
                        if node is None or obj["spec"].get("nodeName") == node:
                            self._chunk({"type": kind, "object": obj})
                if bookmarks:  # as the API server does before it ends a watch at its timeout
                    with api.lock:
                        since = max(since, api._rv)
                    self._chunk({"type": "BOOKMARK", "object": {
                        "kind": "Pod", "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(since)}}})
            finally:
                self._end_chunks()

        def _get_pods(self, path: str, query: dict[str, str], body: Any) -> None:
            m = _POD.match(path)
            assert m is not None
            with api.lock:
                pod = api.pods.get((m["ns"], m["name"]))
            if pod is None:
                self._status(404, "NotFound", f'pods "{m["name"]}" not found')
            else:
                self._json(200, pod)

        def _patch_pods(self, path: str, query: dict[str, str], body: Any) -> None:
            m = _POD.match(path)
            assert m is not None
            if self.headers.get("Content-Type") != "application/merge-patch+json":
                self._status(415, "UnsupportedMediaType", "expected a merge patch")
                return
            with api.lock:
                key = (m["ns"], m["name"])
                if key not in api.pods:
                    self._status(404, "NotFound", f'pods "{m["name"]}" not found')
                    return
                stored = api._store_pod(key, merge_patch(api.pods[key], body))
                api._record("MODIFIED", stored)
            self._json(200, stored)

        # --- events ------------------------------------------------------------------------
        def _create_events(self, path: str, query: dict[str, str], body: Any) -> None:
            m = _EVENTS.match(path)
            assert m is not None
            problem = validate_new_event(body, m["ns"], creating=True)
            if problem:
                self._status(422, "Invalid", problem)
                return
            with api.lock:
                key = (m["ns"], body["metadata"]["name"])
                if key in api.events:
                    self._status(409, "AlreadyExists", f'events "{key[1]}" already exists')
                    return
                api._rv += 1
                stored = copy.deepcopy(body)
                stored["metadata"].update(
                    namespace=m["ns"], uid=str(uuid.uuid4()), resourceVersion=str(api._rv)
                )
                api.events[key] = stored
                api.event_writes.append(("create", copy.deepcopy(body)))
                api.lock.notify_all()
            self._json(201, stored)

        def _patch_events(self, path: str, query: dict[str, str], body: Any) -> None:
            m = _EVENTS.match(path)
            assert m is not None
            if self.headers.get("Content-Type") != "application/merge-patch+json":
                self._status(415, "UnsupportedMediaType", "expected a merge patch")
                return
            with api.lock:
                key = (m["ns"], m["name"])
                if key not in api.events:
                    self._status(404, "NotFound", f'events "{m["name"]}" not found')
                    return
                patched = merge_patch(api.events[key], body)
                problem = validate_new_event(patched, m["ns"], creating=False)
                if problem:
                    self._status(422, "Invalid", problem)
                    return
                api._rv += 1
                patched["metadata"]["resourceVersion"] = str(api._rv)
                api.events[key] = patched
                api.event_writes.append(("patch", copy.deepcopy(body)))
                api.lock.notify_all()
            self._json(200, patched)

        # --- wire helpers ------------------------------------------------------------------
        def _json(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, reason: str, message: str) -> None:
            self._json(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "reason": reason, "message": message, "code": code})

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

    return Handler


def _gone() -> dict[str, Any]:
    return {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                        "message": "too old resource version", "reason": "Expired",
                                        "code": 410}}
