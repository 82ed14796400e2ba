"""List + watch the node's pods into the `PodCache` (the only reader of the pods API).

One loop: list with `fieldSelector=spec.nodeName=<node>`, then watch from the list's
resourceVersion (bookmarks keep it fresh); `410 Gone` means the version expired, so list
again; any other failure backs off exponentially, with jitter (oomwatch.kube.backoff), and
each watch asks for a timeout drawn from [watch_timeout_s, 2·watch_timeout_s), so the agents
of a cluster neither retry nor re-watch in step.  Nothing here raises into the caller.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

from oomwatch.kube.backoff import Backoff, watch_timeout_s
from oomwatch.kube.cache import PodCache
from oomwatch.kube.pods import PodDecodeError, PodInfo, decode_pod
from oomwatch.kube.podsapi import PodsApi

log = logging.getLogger(__name__)

PodChange = Callable[[PodInfo | None, PodInfo, bool], None]
"""Called with (previous, current, initial_list) for every pod the API shows."""


class PodWatcher:
    """Keeps `cache` in step with the API; call `run(stop)` on a thread."""

    def __init__(
        self,
        pods: PodsApi,
        node_name: str,
        cache: PodCache,
        on_change: PodChange,
        *,
        watch_timeout_s: int = 300,
        connect_timeout_s: float = 5.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        self._pods = pods
        self._selector = f"spec.nodeName={node_name}"
        self._cache = cache
        self._on_change = on_change
        self._watch_timeout_s = watch_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self.backoff = Backoff(backoff_initial_s, backoff_max_s)
        self._watch: watch.Watch | None = None
        self.watching = threading.Event()  # (any thread reads) the watch reaches the API now
        self._last_error: str | None = None  # (its thread) what the last failure said

    def run(self, stop: threading.Event) -> None:
        resource_version: str | None = None
        while not stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._list()
                began = time.monotonic()
                resource_version = self._watch_from(resource_version, stop)
                self.backoff.reset()
                if time.monotonic() - began < 1.0:  # a server ending watches at once: no spin
                    stop.wait(self._backoff_initial_s)
            except client.ApiException as exc:
                if exc.status == 410:  # resourceVersion expired: relist, no pause
                    log.info("pod_watch_expired", extra={"status": 410, "consequence": "relisting"})
                    resource_version = None
                    continue
                self._failed(f"pods API error {exc.status}: {exc.reason}")
                resource_version = None
            except Exception as exc:  # the API being away must never stop the agent
                self._failed(f"pods API unreachable: {exc}")
            else:
                continue
            stop.wait(self.backoff.next_s())

    def stop(self) -> None:
        """Interrupt a blocked watch (the thread then sees its stop event)."""
        current = self._watch
        if current is not None:
            current.stop()  # type: ignore[no-untyped-call]

    def _failed(self, message: str) -> None:
        if self.watching.is_set() or self._last_error != message:
            log.warning(
                "pod_watch_failed",
                extra={"error": message, "retry_within_s": round(self.backoff.ceiling_s, 1)},
            )
        self.watching.clear()
        self._last_error = message

    def _list(self) -> str | None:
        # Raw JSON, not models: the cache decodes dicts, and watch events arrive as dicts too.
        response: Any = self._pods.list_pod_for_all_namespaces(
            field_selector=self._selector,
            _request_timeout=(self._connect_timeout_s, 60),
        )
        data: Any = json.loads(response.data)
        initial = not self._cache.synced
        pods = [p for p in (_decode(item) for item in data.get("items") or []) if p is not None]
        previous = self._cache.replace(pods)
        self._last_error = None
        self.watching.set()
        for pod in pods:
            self._notify(previous.get(pod.uid), pod, initial)
        rv = (data.get("metadata") or {}).get("resourceVersion")
        return rv if isinstance(rv, str) and rv else None

    def _watch_from(self, resource_version: str | None, stop: threading.Event) -> str | None:
        if resource_version is None:
            return None
        # return_type "object": events stay dicts; the client's models would reject (and end
        # the watch on) any pod field they validate more strictly than the API server does.
        self._watch = w = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]
        try:
            for event in w.stream(  # type: ignore[no-untyped-call]
                self._pods.list_pod_for_all_namespaces,
                field_selector=self._selector,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=(timeout_s := watch_timeout_s(self._watch_timeout_s)),
                _request_timeout=(self._connect_timeout_s, timeout_s + 30),
            ):
                self.watching.set()
                raw = event.get("raw_object") or {}
                rv = (raw.get("metadata") or {}).get("resourceVersion")
                if isinstance(rv, str) and rv:
                    resource_version = rv
                pod = _decode(raw) if event.get("type") != "BOOKMARK" else None
                if pod is not None:
                    if event.get("type") == "DELETED":
                        self._cache.delete(pod)
                    else:
                        self._notify(self._cache.upsert(pod), pod, False)
                if stop.is_set():
                    w.stop()  # type: ignore[no-untyped-call]
        finally:
            self._watch = None
        return resource_version

    def _notify(self, previous: PodInfo | None, pod: PodInfo, initial: bool) -> None:
        try:
            self._on_change(previous, pod, initial)
        except Exception:  # a bug in a consumer must not stop the cache
            log.exception("pod_handler_failed", extra={"namespace": pod.namespace, "pod": pod.name})


def _decode(raw: Any) -> PodInfo | None:
    try:
        return decode_pod(raw) if isinstance(raw, dict) else None
    except PodDecodeError as exc:
        log.warning("pod_ignored", extra={"error": str(exc)})
        return None
