"""The pre-OOM warning as a `MemoryLimitApproaching` Event on the pod.

Same rules as a kill's Event (oomwatch.kube.events): only on a pod the API's cache knows by
the UID the cgroup path names, its container by the ID the path names, the note escaped and
at most 1024 bytes.  Warnings of one container in a row update one Event's series.  The
Event is built when the publisher gets to it, so a warning made while the pod cache lags
the API waits instead of being lost.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from oomwatch.kube.cache import PodCache
from oomwatch.kube.events import (
    NOTE_MAX_BYTES,
    EventDraft,
    clip_utf8,
    micro_time,
    regarding_pod,
)
from oomwatch.kube.pods import PodInfo
from oomwatch.kube.publisher import EventPublisher, EventUpdate, NotReady, Update
from oomwatch.kube.summary import (
    REPORTING_CONTROLLER,
    SUMMARY_ANNOTATION,
    warning_summary,
    workload_name,
)
from oomwatch.sanitize import escape_control

REASON_APPROACHING = "MemoryLimitApproaching"


def build_warning_event(
    pod: PodInfo | None,
    container_id: str | None,
    note: str,
    details: dict[str, Any],
    node_name: str,
    now: datetime,
) -> EventDraft | None:
    """The Event for a warning of a container of `pod` (the cache's pod for the UID of the
    container's cgroup), or None when the API does not know that pod."""
    if pod is None:
        return None
    found = pod.container_by_id(container_id) if container_id else None
    container = found.name if found is not None else None
    key = f"{pod.uid}\x1f{container_id or ''}\x1f{details.get('at_s')}\x1f{REASON_APPROACHING}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    workload = workload_name(pod.owner_kind, pod.owner_name, pod.name)
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{pod.name[:236]}.{digest}",
            "namespace": pod.namespace,
            "annotations": {
                SUMMARY_ANNOTATION: warning_summary(details, workload, container, node_name)
            },
        },
        "eventTime": micro_time(now),
        "type": "Warning",
        "reason": REASON_APPROACHING,
        "action": "Predicted",
        "note": clip_utf8(escape_control(note), NOTE_MAX_BYTES),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": f"oomwatch-{node_name}"[:128],
        "regarding": regarding_pod(pod, container),
    }
    series_key = (pod.namespace, "Pod", pod.name, pod.uid, container or "", REASON_APPROACHING)
    return EventDraft(pod.namespace, body, series_key, container)


class WarningEvents:
    """Queues `MemoryLimitApproaching` Events on the publisher (thread-safe, never raises)."""

    def __init__(
        self,
        node_name: str,
        cache: PodCache,
        publisher: EventPublisher,
        cache_live: Callable[[], bool],
    ) -> None:
        self._node_name = node_name
        self._cache = cache
        self._publisher = publisher
        self._cache_live = cache_live

    def warn(
        self, pod_uid: str, container_id: str | None, note: str, details: dict[str, Any]
    ) -> None:
        now = datetime.now(UTC)

        def build() -> list[Update]:
            pod = self._cache.get(pod_uid)
            if pod is None and not self._cache_live():
                raise NotReady("pod cache not in step with the API")
            draft = build_warning_event(pod, container_id, note, details, self._node_name, now)
            return [] if draft is None else [EventUpdate(draft, now)]

        self._publisher.submit(build, "memory limit warning")
