"""The fake API server: one in-memory cluster (pods, Events, OOMIncidents, the watch history)
and the handler that routes each request to its resource, checks the user's grants and
records the request."""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

from support.fakeapi.discovery import DISCOVERY, discovery
from support.fakeapi.events import _CORE_EVENTS, _EVENTS, EventRoutes
from support.fakeapi.oomincidents import _OOMI, OomIncidentRoutes
from support.fakeapi.pods import _EXEC, _NS_PODS, _POD, PodRoutes
from support.fakeapi.wire import ApiHttpServer

Verb = tuple[str, str, str]  # (verb, apiGroup, resource)

ALL_REQUESTS: set[Verb] = set()
"""Every (verb, group, resource) any FakeApiServer saw in this test session."""

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
        self._server: ApiHttpServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeApiServer:
        self._server = ApiHttpServer(("127.0.0.1", self.port), Handler, self)
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


class Handler(PodRoutes, EventRoutes, OomIncidentRoutes):
    """Routes a request to its resource's handler (`_<verb>_<resource>`), after the user's
    grants, the injected failures and the server's availability."""

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
        if self.api._server is None:  # "down": a pooled keep-alive connection is reset too
            self.close_connection = True
            return
        if method == "GET" and url.path in DISCOVERY:  # what kubectl asks first
            self._json(200, discovery(url.path, self.api.crd_installed))
            return
        route = self._route(method, url.path, query)
        if route is None:
            self._status(404, "NotFound", f"no route for {method} {url.path}")
            return
        verb, group, resource = route
        if not self._authorized(verb, group, resource, url.path):
            self._status(
                403,
                "Forbidden",
                f"cannot {verb} resource {resource!r} in API group {group!r} at {url.path}",
            )
            return
        with self.api.lock:
            self.api.requests.append((verb, group, resource, url.path))
            self.api.authorizations.add((verb, self.headers.get("Authorization") or ""))
            if self.api.guard_rbac:
                ALL_REQUESTS.add((verb, group, resource))
            failure = next(
                (f for f in self.api.fail_next if f[0] == verb and resource != "oomincidents"), None
            )
            if failure is not None:
                self.api.fail_next.remove(failure)
            self.api.lock.notify_all()
        if self.api.unavailable:
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
        grants = self.api.users.get(user)
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
        if oomi and self.api.crd_installed:
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
