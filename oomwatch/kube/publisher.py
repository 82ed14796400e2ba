"""Delivers Events and annotations to the API from a bounded queue, surviving outages.

The pipeline only enqueues (never blocks, never raises).  One worker thread sends in order;
while the API is away the head of the queue waits with jittered exponential backoff
(oomwatch.kube.backoff: agents of many nodes do not retry in step), and when the queue is full
the oldest item is dropped and counted.  Repeats of the same (object,
container, reason) PATCH the existing Event's `series` instead of creating new Events.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import urllib3.exceptions
from kubernetes import client

from oomwatch.kube.backoff import Backoff
from oomwatch.kube.events import ANNOTATION_KEY, EventDraft, micro_time
from oomwatch.kube.podsapi import PodsApi

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
RETRYABLE_STATUSES = frozenset({0, 408, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class EventUpdate:
    """Create the Event, or PATCH its series when the same key was sent recently."""

    draft: EventDraft
    observed_at: datetime


@dataclass(frozen=True, slots=True)
class AnnotationUpdate:
    """Merge-patch `oomwatch.io/last-oom-kill` on a pod."""

    namespace: str
    pod: str
    value: str


Update = EventUpdate | AnnotationUpdate


class NotReady(Exception):
    """A deferred update cannot be built yet (e.g. the pod cache has not reached the API)."""


@dataclass(frozen=True, slots=True)
class _Deferred:
    """Updates built by the worker when they reach the head of the queue, not at submit."""

    build: Callable[[], list[Update]]
    label: str


@dataclass(slots=True)
class _Series:
    name: str
    namespace: str
    count: int
    updated_at_s: float


class _Retry(Exception):
    """The API did not take the item now; keep it at the head and back off."""


class EventPublisher:
    """Bounded, ordered, retrying delivery of Events and pod annotations."""

    def __init__(
        self,
        events_api: client.EventsV1Api,
        pods_api: PodsApi,
        *,
        max_queue: int = 1000,
        series_ttl_s: float = 1800.0,
        request_timeout_s: float = 10.0,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._events = events_api
        self._pods = pods_api
        self._queue: deque[Update | _Deferred] = deque()
        self._max_queue = max_queue
        self._cond = threading.Condition()
        self._series: dict[tuple[str, ...], _Series] = {}
        self._series_ttl_s = series_ttl_s  # Events expire (apiserver --event-ttl, 1h default)
        self._timeout = (min(5.0, request_timeout_s), request_timeout_s)
        self.backoff = Backoff(backoff_initial_s, backoff_max_s)
        self._clock = clock
        self.dropped = 0
        self.delivered = 0
        self._reachable = threading.Event()  # (its thread sets) the API answered last time
        self._reachable.set()

    def submit(self, build: Callable[[], list[Update]], label: str) -> None:
        """Queue updates that `build` makes when their turn comes; it may raise `NotReady`."""
        self._put(_Deferred(build, label))

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def reachable(self) -> bool:
        """(Any thread) whether the API answered the last delivery (until one fails, yes)."""
        return self._reachable.is_set()

    def run(self, stop: threading.Event) -> None:
        """Worker loop: deliver the head item, back off while the API fails."""
        while not stop.is_set():
            with self._cond:
                if not self._queue:
                    self._cond.wait(timeout=0.5)
                    continue
                item = self._queue[0]
            try:
                if isinstance(item, _Deferred):
                    self._expand(item)
                    self.backoff.reset()
                    continue
                self._deliver(item)
            except (_Retry, NotReady) as exc:
                if self._reachable.is_set():
                    log.warning(
                        "kube_api_unavailable", extra={"error": str(exc), "queued": self.pending()}
                    )
                self._reachable.clear()
                stop.wait(self.backoff.next_s())
                continue
            except client.ApiException as exc:  # rejected (forbidden, invalid, pod gone)
                self._reachable.set()  # it answered
                log.warning(
                    "kube_rejected",
                    extra={"update": _describe(item), "status": exc.status, "reason": exc.reason},
                )
            except Exception:  # a bug: say so loudly, but keep delivering the rest
                log.exception("kube_update_dropped", extra={"update": _describe(item)})
            else:
                self.delivered += 1
                self._reachable.set()
            self.backoff.reset()
            with self._cond:
                if self._queue and self._queue[0] is item:
                    self._queue.popleft()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _expand(self, item: _Deferred) -> None:
        """Replace the head `_Deferred` by the updates it builds now (maybe none)."""
        updates = item.build()
        with self._cond:
            if self._queue and self._queue[0] is item:
                self._queue.popleft()
                self._queue.extendleft(reversed(updates))

    def _put(self, item: Update | _Deferred) -> None:
        with self._cond:
            if len(self._queue) >= self._max_queue:
                # Keep the head: the worker may be sending it right now.
                del self._queue[1 if len(self._queue) > 1 else 0]
                self.dropped += 1
            self._queue.append(item)
            self._cond.notify_all()

    def _deliver(self, item: Update) -> None:
        try:
            if isinstance(item, AnnotationUpdate):
                patch = {"metadata": {"annotations": {ANNOTATION_KEY: item.value}}}
                self._pods.patch_namespaced_pod(
                    item.pod,
                    item.namespace,
                    patch,
                    _content_type=MERGE_PATCH,
                    _request_timeout=self._timeout,
                )
            else:
                self._deliver_event(item)
        except client.ApiException as exc:
            if (exc.status or 0) in RETRYABLE_STATUSES:
                raise _Retry(f"HTTP {exc.status}") from exc
            raise
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            raise _Retry(type(exc).__name__) from exc

    def _deliver_event(self, item: EventUpdate) -> None:
        draft, now_s = item.draft, self._clock()
        series = self._series.get(draft.series_key)
        if series is not None and now_s - series.updated_at_s < self._series_ttl_s:
            patch: dict[str, Any] = {
                "series": {
                    "count": series.count + 1,
                    "lastObservedTime": micro_time(item.observed_at),
                },
                "note": draft.body["note"],
            }
            annotations = draft.body["metadata"].get("annotations")
            if annotations:  # the latest kill's summary (oomwatch.kube.summary)
                patch["metadata"] = {"annotations": annotations}
            try:
                self._events.patch_namespaced_event(
                    series.name,
                    series.namespace,
                    patch,
                    _content_type=MERGE_PATCH,
                    _request_timeout=self._timeout,
                )
            except client.ApiException as exc:
                if exc.status != 404:  # 404: the Event expired; start a new one below
                    raise
            else:
                series.count += 1
                series.updated_at_s = now_s
                return
        body = client.EventsV1Event.from_dict(draft.body)
        if body is None:
            raise ValueError(f"Event body did not validate: {draft.body!r}")
        try:
            self._events.create_namespaced_event(
                draft.namespace,
                body,
                _request_timeout=self._timeout,
            )
        except client.ApiException as exc:
            if exc.status != 409:  # 409: an earlier attempt did land (names are deterministic)
                raise
        self._series[draft.series_key] = _Series(draft.name, draft.namespace, 1, now_s)
        self._forget_expired(now_s)

    def _forget_expired(self, now_s: float) -> None:
        ttl_s = self._series_ttl_s
        expired = [k for k, s in self._series.items() if now_s - s.updated_at_s >= ttl_s]
        for key in expired:
            del self._series[key]


def _describe(item: Update | _Deferred) -> str:
    if isinstance(item, _Deferred):
        return item.label
    if isinstance(item, AnnotationUpdate):
        return f"annotation on pod {item.namespace}/{item.pod}"
    return f"Event {item.draft.namespace}/{item.draft.name} ({item.draft.body['reason']})"
