"""Pods in the fake API server: the node's list and watch (with bookmarks and `410 Gone`), get,
merge-patch, a namespace's list by label and node, and a refused `pods/exec`."""

from __future__ import annotations

import copy
import re
import time
from typing import Any

from support.fakeapi.objects import merge_patch
from support.fakeapi.wire import ApiHandler, _gone, _selector

_POD = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")
_NS_PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$")
_EXEC = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/exec$")


class PodRoutes(ApiHandler):
    def _node_pods(self, query: dict[str, str]) -> list[dict[str, Any]]:
        selector = query.get("fieldSelector", "")
        node = selector.removeprefix("spec.nodeName=") if selector else None
        return [
            p for p in self.api.pods.values() if node is None or p["spec"].get("nodeName") == node
        ]

    def _list_pods(self, path: str, query: dict[str, str], body: Any) -> None:
        with self.api.lock:
            items = copy.deepcopy(self._node_pods(query))
            rv = str(self.api._rv)
        self._list("PodList", "v1", items, {"resourceVersion": rv})

    def _watch_pods(self, path: str, query: dict[str, str], body: Any) -> None:
        since = int(query.get("resourceVersion") or 0)
        with self.api.lock:
            self.api.watch_versions.append(query.get("resourceVersion") or "")
        bookmarks = query.get("allowWatchBookmarks") == "true"
        timeout_s = float(query.get("timeoutSeconds") or 1800)
        selector = query.get("fieldSelector", "")
        node = selector.removeprefix("spec.nodeName=") if selector else None
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout_s
        with self.api.lock:
            generation = self.api._generation
        try:
            if since < self.api._oldest_rv:
                self._chunk(_gone())
                return
            while time.monotonic() < deadline:
                with self.api.lock:
                    if self.api._generation != generation:
                        if self.api._oldest_rv > since:
                            self._chunk(_gone())
                        return
                    fresh = [(rv, k, o) for rv, k, o in self.api._history if rv > since]
                    if not fresh:
                        self.api.lock.wait(min(0.2, deadline - time.monotonic()))
                        continue
                for rv, kind, obj in fresh:
                    since = rv
                    if node is None or obj["spec"].get("nodeName") == node:
                        self._chunk({"type": kind, "object": obj})
            if bookmarks:  # as the API server does before it ends a watch at its timeout
                with self.api.lock:
                    since = max(since, self.api._rv)
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
        with self.api.lock:
            pod = self.api.pods.get((m["ns"], m["name"]))
        if pod is None:
            self._status(404, "NotFound", f'pods "{m["name"]}" not found')
        else:
            self._json(200, pod)

    def _patch_pods(self, path: str, query: dict[str, str], body: Any) -> None:
        m = _POD.match(path)
        assert m is not None
        if not self._merge_patch_only():
            return
        with self.api.lock:
            key = (m["ns"], m["name"])
            if key not in self.api.pods:
                self._status(404, "NotFound", f'pods "{m["name"]}" not found')
                return
            stored = self.api._store_pod(key, merge_patch(self.api.pods[key], body))
            self.api._record("MODIFIED", stored)
        self._json(200, stored)

    def _list_pods_namespaced(self, path: str, query: dict[str, str], body: Any) -> None:
        m = _NS_PODS.match(path)
        assert m is not None
        labels = _selector(query.get("labelSelector", ""))
        fields = _selector(query.get("fieldSelector", ""))
        with self.api.lock:
            items = [
                copy.deepcopy(p)
                for (ns, _), p in self.api.pods.items()
                if ns == m["ns"]
                and all(p["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
                and all(
                    p["spec"].get("nodeName") == v
                    for k, v in fields.items()
                    if k == "spec.nodeName"
                )
            ]
            rv = str(self.api._rv)
        self._list("PodList", "v1", items, {"resourceVersion": rv})

    def _create_pods_exec(self, path: str, query: dict[str, str], body: Any) -> None:
        """Recorded (the plugin's tests assert none came), never served."""
        self._status(400, "BadRequest", "this fake API serves no exec")
