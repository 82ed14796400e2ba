"""A local stand-in for the Kubernetes API server, for the unmodified official client.

Serves what oomwatch uses, the way kube-apiserver answers it: pod list with a
resourceVersion, chunked watch streams (with bookmarks and `410 Gone` once the history is
compacted), events.k8s.io/v1 create and merge-patch with the API server's validation of
new-style Events, pod get and merge-patch.  For the `kubectl oomwatch` plugin (a user's
requests, outside the agent's RBAC guard: `guard_rbac=False`): core/v1 Event lists (the same
objects in the core view, field selectors, `limit`/`continue`), namespaced pod lists (label
and node selectors), and the `OOMIncident` CRD's discovery and objects (checked against its
schema, `managedFields` recorded, Tables of its printer columns for `kubectl get`; `users`
limits what a named user may do, as RBAC would); a `pods/exec` is recorded and refused.
Tests can fail requests (`fail_next`), answer
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

from fakeapi_objects import NODE, make_pod, merge_patch, oomincident_problem, validate_new_event

from oomwatch.kube.crd import PRINTER_COLUMNS

__all__ = ["ALL_REQUESTS", "NODE", "FakeApiServer", "make_pod"]

Verb = tuple[str, str, str]  # (verb, apiGroup, resource)

ALL_REQUESTS: set[Verb] = set()
"""Every (verb, group, resource) any FakeApiServer saw in this test session."""

_POD = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")
_EVENTS = re.compile(
    r"^/apis/events\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/events(?:/(?P<name>[^/]+))?$"
)
_CORE_EVENTS = re.compile(r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/events$")
_NS_PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$")
_EXEC = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/exec$")
_OOMI = re.compile(
    r"^/apis/oomwatch\.io/v1alpha1(?:/namespaces/(?P<ns>[^/]+))?/oomincidents(?:/(?P<name>[^/]+))?$"
)
_NAMESPACE = re.compile(r"^/apis?/(?:[^/]+/)?[^/]+/namespaces/(?P<ns>[^/]+)/")


class FakeApiServer:
    """One in-memory cluster; `url` is what a kubeconfig's `server:` points at."""

    def __init__(self, *, guard_rbac: bool = True, crd_installed: bool = True) -> None:
        self.guard_rbac = guard_rbac  # False: a user's requests, not the agent's
        self.crd_installed = crd_installed  # the OOMIncident CRD (oomwatch.kube.crd)
        self.oomincidents: dict[tuple[str, str], dict[str, Any]] = {}
        # User (Impersonate-User) -> what RBAC grants it: (verb, group, resource, namespace,
        # None for all).  A user not here is not checked (the agent, a test's admin).
        self.users: dict[str, set[tuple[str, str, str, str | None]]] = {}
        self.oomincident_writes: list[tuple[str, str]] = []  # (verb, name)
        self.lock = threading.Condition()
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str, str, str]] = []  # verb, group, resource, path
        self.watch_versions: list[str] = []  # resourceVersion each watch asked to start from
        self.authorizations: set[tuple[str, str]] = set()  # (verb, Authorization header)
        self.event_writes: list[tuple[str, dict[str, Any]]] = []  # ("create"|"patch", body)
        # (verb, status) answered once each, by the first such request for anything but the
        # OOMIncidents (the tests that inject failures are about Events and pods)
        self.fail_next: list[tuple[str, int]] = []
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


def _make_handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:  # noqa: C901 -- mccabe counts the nested handler class's methods as this one function
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

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        # --- routing -----------------------------------------------------------------------
        def _dispatch(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null") if length else None
            if api._server is None:  # "down": a pooled keep-alive connection is reset too
                self.close_connection = True
                return
            if method == "GET" and url.path in _DISCOVERY:  # what kubectl asks first
                self._json(200, _discovery(url.path, api.crd_installed))
                return
            route = self._route(method, url.path, query)
            if route is None:
                self._status(404, "NotFound", f"no route for {method} {url.path}")
                return
            verb, group, resource = route
            if not self._authorized(verb, group, resource, url.path):
                self._status(403, "Forbidden", f"cannot {verb} resource {resource!r} in API"
                             f" group {group!r} at {url.path}")  # fmt: skip
                return
            with api.lock:
                api.requests.append((verb, group, resource, url.path))
                api.authorizations.add((verb, self.headers.get("Authorization") or ""))
                if api.guard_rbac:
                    ALL_REQUESTS.add((verb, group, resource))
                failure = next((f for f in api.fail_next
                                if f[0] == verb and resource != "oomincidents"), None)  # fmt: skip
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

        def _authorized(self, verb: str, group: str, resource: str, path: str) -> bool:
            # kubectl sends no bearer token to a plain-http server: the user is named by the
            # kubeconfig's `as:` (the Impersonate-User header) instead.
            user = self.headers.get("Impersonate-User") or (
                self.headers.get("Authorization") or ""
            ).removeprefix("Bearer ")
            grants = api.users.get(user)
            if grants is None:
                return True
            namespace = _NAMESPACE.match(path)
            ns = namespace["ns"] if namespace else None
            resource = resource.removesuffix("_namespaced")
            return (verb, group, resource, None) in grants or (
                ns is not None and (verb, group, resource, ns) in grants
            )

        def _route(self, method: str, path: str, query: dict[str, str]) -> Verb | None:
            oomi = _OOMI.match(path)
            if oomi and api.crd_installed:
                named = oomi.group("name") is not None
                if not named and not oomi.group("ns") and method != "GET":
                    return None
                verb = (
                    {"GET": "get", "PATCH": "patch", "DELETE": "delete"}
                    if named
                    else {"GET": "list", "POST": "create"}
                ).get(method)
                return (verb, "oomwatch.io", "oomincidents") if verb else None
            if method == "GET" and _CORE_EVENTS.match(path):
                return ("list", "", "events")
            if method == "GET" and _NS_PODS.match(path):
                return ("list", "", "pods_namespaced")
            if method in ("GET", "POST") and _EXEC.match(path):
                return ("create", "", "pods/exec")
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
            self._json(
                200,
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": rv},
                    "items": items,
                },
            )

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
                    self._chunk(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": "Pod",
                                "apiVersion": "v1",
                                "metadata": {"resourceVersion": str(since)},
                            },
                        }
                    )
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

        def _list_pods_namespaced(self, path: str, query: dict[str, str], body: Any) -> None:
            m = _NS_PODS.match(path)
            assert m is not None
            labels = _selector(query.get("labelSelector", ""))
            fields = _selector(query.get("fieldSelector", ""))
            with api.lock:
                items = [
                    copy.deepcopy(p) for (ns, _), p in api.pods.items()
                    if ns == m["ns"]
                    and all(p["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
                    and all(p["spec"].get("nodeName") == v
                            for k, v in fields.items() if k == "spec.nodeName")
                ]  # fmt: skip
                rv = str(api._rv)
            self._json(
                200,
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": rv},
                    "items": items,
                },
            )

        def _create_pods_exec(self, path: str, query: dict[str, str], body: Any) -> None:
            """Recorded (the plugin's tests assert none came), never served."""
            self._status(400, "BadRequest", "this fake API serves no exec")

        # --- events ------------------------------------------------------------------------
        def _list_events(self, path: str, query: dict[str, str], body: Any) -> None:
            m = _CORE_EVENTS.match(path)
            assert m is not None
            fields = _selector(query.get("fieldSelector", ""))
            with api.lock:
                items = [core_event(e) for (ns, _), e in sorted(api.events.items())
                         if m["ns"] in (None, ns)]  # fmt: skip
                rv = str(api._rv)
            items = [e for e in items if all(_field(e, k) == v for k, v in fields.items())]
            start = int(query.get("continue") or 0)
            limit = int(query.get("limit") or 0) or len(items)
            page, rest = items[start : start + limit], start + limit < len(items)
            meta: dict[str, Any] = {"resourceVersion": rv}
            if rest:
                meta["continue"] = str(start + limit)
            self._json(
                200, {"kind": "EventList", "apiVersion": "v1", "metadata": meta, "items": page}
            )

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

        # --- oomincidents (the CRD's objects, checked against its schema) --------------------
        def _oomi_key(self, path: str) -> tuple[str | None, str | None]:
            m = _OOMI.match(path)
            assert m is not None
            return m["ns"], m["name"]

        def _list_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
            ns, _ = self._oomi_key(path)
            labels = _selector(query.get("labelSelector", ""))
            with api.lock:
                items = [copy.deepcopy(o) for (n, _), o in sorted(api.oomincidents.items())
                         if ns in (None, n) and all(
                             o["metadata"].get("labels", {}).get(k) == v
                             for k, v in labels.items())]  # fmt: skip
                rv = str(api._rv)
            if self._wants_table():
                self._json(200, _table(items, rv))
                return
            self._json(200, {"kind": "OOMIncidentList", "apiVersion": "oomwatch.io/v1alpha1",
                             "metadata": {"resourceVersion": rv}, "items": items})  # fmt: skip

        def _get_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
            ns, name = self._oomi_key(path)
            with api.lock:
                obj = copy.deepcopy(api.oomincidents.get((ns or "", name or "")))
            if obj is None:
                self._status(404, "NotFound", f'oomincidents.oomwatch.io "{name}" not found')
            elif self._wants_table():
                self._json(200, _table([obj], obj["metadata"]["resourceVersion"]))
            else:
                self._json(200, obj)

        def _create_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
            ns, _ = self._oomi_key(path)
            problem = oomincident_problem(body)
            if problem:
                self._status(422, "Invalid", problem)
                return
            with api.lock:
                key = (ns or "", body["metadata"]["name"])
                if key in api.oomincidents:
                    self._status(409, "AlreadyExists", f'oomincidents "{key[1]}" already exists')
                    return
                api._rv += 1
                stored = copy.deepcopy(body)
                stored["metadata"].update(
                    namespace=key[0],
                    uid=str(uuid.uuid4()),
                    resourceVersion=str(api._rv),
                    creationTimestamp=_now(),
                    managedFields=_managed([], query.get("fieldManager"), "Update"),
                )
                api.oomincidents[key] = stored
                api.oomincident_writes.append(("create", key[1]))
                api.lock.notify_all()
            self._json(201, stored)

        def _patch_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
            ns, name = self._oomi_key(path)
            if self.headers.get("Content-Type") != "application/merge-patch+json":
                self._status(415, "UnsupportedMediaType", "expected a merge patch")
                return
            with api.lock:
                key = (ns or "", name or "")
                if key not in api.oomincidents:
                    self._status(404, "NotFound", f'oomincidents "{name}" not found')
                    return
                patched = merge_patch(api.oomincidents[key], body)
                problem = oomincident_problem(patched)
                if problem:
                    self._status(422, "Invalid", problem)
                    return
                api._rv += 1
                meta = patched["metadata"]
                meta["resourceVersion"] = str(api._rv)
                meta["managedFields"] = _managed(meta.get("managedFields") or [],
                                                 query.get("fieldManager"), "Update")  # fmt: skip
                api.oomincidents[key] = patched
                api.oomincident_writes.append(("patch", key[1]))
                api.lock.notify_all()
            self._json(200, patched)

        def _delete_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
            ns, name = self._oomi_key(path)
            with api.lock:
                gone = api.oomincidents.pop((ns or "", name or ""), None)
                if gone is not None:
                    api.oomincident_writes.append(("delete", name or ""))
                api.lock.notify_all()
            if gone is None:
                self._status(404, "NotFound", f'oomincidents "{name}" not found')
            else:
                self._json(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

        def _wants_table(self) -> bool:
            return "as=Table" in (self.headers.get("Accept") or "")

        # --- wire helpers ------------------------------------------------------------------
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

    return Handler


def _resources(group_version: str, *rows: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": [{"name": name, "singularName": "", "namespaced": True, "kind": kind,
                           "verbs": verbs} for name, kind, verbs in rows]}  # fmt: skip


_EVENTS_GV = {"groupVersion": "events.k8s.io/v1", "version": "v1"}
_OOMI_GV = {"groupVersion": "oomwatch.io/v1alpha1", "version": "v1alpha1"}
_DISCOVERY: dict[str, dict[str, Any]] = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "events.k8s.io", "versions": [_EVENTS_GV], "preferredVersion": _EVENTS_GV}]},
    "/api/v1": _resources("v1", ("pods", "Pod", ["get", "list", "watch", "patch"]),
                          ("pods/exec", "PodExecOptions", ["create", "get"]),
                          ("events", "Event", ["list"])),
    "/apis/events.k8s.io/v1": _resources("events.k8s.io/v1",
                                         ("events", "Event", ["create", "patch", "list"])),
    "/apis/oomwatch.io/v1alpha1": _resources(
        "oomwatch.io/v1alpha1", ("oomincidents", "OOMIncident",
                                 ["create", "delete", "get", "list", "patch"])),
}  # fmt: skip
_DISCOVERY["/apis/oomwatch.io/v1alpha1"]["resources"][0].update(
    singularName="oomincident", shortNames=["oomi"], categories=["oomwatch"]
)


def _discovery(path: str, crd_installed: bool) -> dict[str, Any]:
    """Discovery as the API server answers it, the oomwatch.io group only with its CRD."""
    doc = copy.deepcopy(_DISCOVERY[path])
    if path == "/apis" and crd_installed:
        doc["groups"].append({"name": "oomwatch.io", "versions": [_OOMI_GV],
                              "preferredVersion": _OOMI_GV})  # fmt: skip
    if path == "/apis/oomwatch.io/v1alpha1" and not crd_installed:
        doc["resources"] = []
    return doc


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _managed(entries: list[dict[str, Any]], manager: str | None, operation: str) -> list[Any]:
    """managedFields after a write by `manager` (the API server records who wrote)."""
    name = manager or "unknown"
    kept = [e for e in entries if e.get("manager") != name]
    return [*kept, {"manager": name, "operation": operation, "apiVersion": "oomwatch.io/v1alpha1",
                    "time": _now(), "fieldsType": "FieldsV1", "fieldsV1": {}}]  # fmt: skip


def _cell(obj: dict[str, Any], column: dict[str, Any]) -> Any:
    """A cell as the API server's CRD table convertor gives it: dates as an age (`5m`)."""
    value = _field(obj, column["jsonPath"].lstrip("."))
    if column["type"] != "date" or not isinstance(value, str):
        return value
    then = time.mktime(time.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    age_s = max(0, int(time.time() - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if age_s >= size:
            return f"{age_s // size}{unit}"
    return f"{age_s}s"


def _table(items: list[dict[str, Any]], rv: str) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of the CRD's printer columns (what kubectl get shows)."""
    columns = [{"name": "Name", "type": "string", "format": "name", "priority": 0}]
    columns += [{"name": c["name"], "type": c["type"], "priority": c.get("priority", 0)}
                for c in PRINTER_COLUMNS]  # fmt: skip
    rows = [{"cells": [o["metadata"]["name"], *(_cell(o, c) for c in PRINTER_COLUMNS)],
             "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": o["metadata"]}} for o in items]  # fmt: skip
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": columns,
        "rows": rows,
    }


def core_event(event: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event in the core/v1 view the API server serves of the same object."""
    core = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": copy.deepcopy(event["metadata"]),
        "involvedObject": copy.deepcopy(event.get("regarding") or {}),
        "reason": event.get("reason"),
        "message": event.get("note"),
        "type": event.get("type"),
        "action": event.get("action"),
        "eventTime": event.get("eventTime"),
        "reportingComponent": event.get("reportingController"),
        "reportingInstance": event.get("reportingInstance"),
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
    }
    if event.get("series"):
        core["series"] = copy.deepcopy(event["series"])
    return core


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
