"""`KubeIntegration`: the daemon's one handle on Kubernetes (enricher, sink, status signals).

Four daemon threads: the pod watcher (cache, and `verifier.PodChanges` on each change), the
publisher (Events, annotations), the verifier (`verifier.ClaimVerifier`: false OOMKilled)
and the `OOMIncident` writer.  Each is given its own object, never this one; what the loop
reads of them is a published value (the watch's and the cache's state, the publisher's and
the writer's reach: `threading.Event`s).  The pipeline sees only `.enricher` and `.sink`,
neither of which blocks or raises.
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config

from oomwatch.incident import Incident, parse_iso
from oomwatch.kube.cache import PodCache
from oomwatch.kube.enrich import PodEnricher
from oomwatch.kube.events import ReportHint, annotation_value, build_event, micro_time
from oomwatch.kube.forecast_event import WarningEvents
from oomwatch.kube.incident_writer import IncidentWriter
from oomwatch.kube.oomincident import Fingerprint, build_object
from oomwatch.kube.pods import PodInfo
from oomwatch.kube.podsapi import PodsApi
from oomwatch.kube.publisher import (
    AnnotationUpdate,
    EventPublisher,
    EventUpdate,
    NotReady,
    Update,
)
from oomwatch.kube.summary import workload_name
from oomwatch.kube.verifier import ClaimVerifier, KernelKillsFor, PodChanges
from oomwatch.kube.watcher import PodWatcher

log = logging.getLogger(__name__)

__all__ = ["KernelKillsFor", "KubeIntegration", "KubeSink", "default_api_client"]


def default_api_client() -> client.ApiClient:
    """In-cluster service account, else the kubeconfig (`KUBECONFIG` or ~/.kube/config)."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return client.ApiClient()
    except config.ConfigException:
        api: client.ApiClient = config.new_client_from_config()  # type: ignore[no-untyped-call]
        return api


def _in_step(cache: PodCache, watching: threading.Event) -> bool:
    """(Any thread) whether the cache has listed the pods and the watch still reaches the API."""
    return cache.synced and watching.is_set()


class KubeSink:
    """Sink: one Event per incident (series on repeats), and the opt-in pod annotation.

    The Event is built when the publisher gets to it, not at `emit`: an incident that
    arrives while the pod cache has not reached the API (agent started during an outage)
    waits in the queue until the pod is known, instead of losing its Event.
    """

    def __init__(
        self,
        node_name: str,
        cache: PodCache,
        publisher: EventPublisher,
        annotate: bool,
        cache_live: Callable[[], bool],
        hint: ReportHint | None = None,
        incidents: IncidentWriter | None = None,
    ) -> None:
        self._node_name = node_name
        self._incidents = incidents
        self._hint = hint or ReportHint()
        self._cache = cache
        self._publisher = publisher
        self._annotate = annotate
        self._cache_live = cache_live

    def emit(self, incident: Incident) -> None:
        try:
            frozen = copy.deepcopy(incident)  # other sinks and stages keep theirs
            now = datetime.now(UTC)
            self._publisher.submit(
                lambda: self._updates(frozen, now), f"{incident.kind} incident update"
            )
        except Exception:  # a sink never raises into the pipeline
            log.exception("event_queue_failed")

    def _updates(self, incident: Incident, observed_at: datetime) -> list[Update]:
        pod = self._cache.get(incident.pod_uid) if incident.pod_uid else None
        if incident.pod_uid and pod is None and not self._cache_live():
            raise NotReady("pod cache not in step with the API")
        draft = build_event(incident, self._node_name, observed_at, pod, self._hint)
        if draft is None:
            return []
        updates: list[Update] = [EventUpdate(draft, observed_at)]
        if self._incidents is not None and pod is not None and incident.pod_uid:
            self._offer_incident(incident, pod, draft.container, observed_at)
        if self._annotate and pod is not None:
            value = annotation_value(incident, observed_at, draft.container)
            updates.append(AnnotationUpdate(pod.namespace, pod.name, value))
        return updates

    def _offer_incident(
        self, incident: Incident, pod: PodInfo, container: str | None, observed_at: datetime
    ) -> None:
        """The kill's `OOMIncident` to the writer (it coalesces and rate-limits)."""
        assert self._incidents is not None
        fingerprint = Fingerprint(
            namespace=pod.namespace,
            workload=workload_name(pod.owner_kind, pod.owner_name, pod.name),
            container=container or "",
            verdict_code=incident.verdict_code or "undiagnosed",
            node=self._node_name,
        )
        when = parse_iso(incident.wall_time) if incident.wall_time else None
        seen = micro_time(when or observed_at)
        obj = build_object(
            incident, fingerprint, pod=pod.name, kills=1, first_seen=seen, last_seen=seen
        )
        self._incidents.offer(fingerprint, obj, seen)

    def close(self) -> None:
        self._publisher.wake()


class KubeIntegration:
    """Pod cache + enrichment + Events/annotations + eviction and false-OOMKilled incidents.

    `submit` hands the incidents this class finds (kinds `eviction`, `false_oomkilled`) to
    the pipeline; it is called from this class's threads, so it must be thread-safe.
    """

    def __init__(
        self,
        node_name: str,
        *,
        annotate: bool,
        submit: Callable[[Incident], None],
        kernel_kills_for: KernelKillsFor,
        api_client: client.ApiClient | None = None,
        verify_delay_s: float = 15.0,
        watch_timeout_s: int = 300,
        max_queue: int = 1000,
        backoff_max_s: float = 30.0,
        write_incidents: bool = True,
        incident_retention_s: float = 14 * 86400,
        incident_writer_options: dict[str, Any] | None = None,
    ) -> None:
        self.node_name = node_name
        self.cache = PodCache()
        self.enricher = PodEnricher(self.cache)
        self._stop = threading.Event()
        self._threads: tuple[threading.Thread, ...] = ()  # replaced whole once started
        self._verifier = ClaimVerifier(submit, kernel_kills_for, verify_delay_s)
        self._changes = PodChanges(submit, self._verifier)
        # Reads the service-account token or kubeconfig now, so a missing one fails at startup.
        api = api_client or default_api_client()
        self.publisher = EventPublisher(
            client.EventsV1Api(api),
            PodsApi(api),
            max_queue=max_queue,
            backoff_max_s=backoff_max_s,
        )
        self.incidents: IncidentWriter | None = None
        if write_incidents:
            self.incidents = IncidentWriter(
                client.CustomObjectsApi(api),
                node_name,
                retention_s=incident_retention_s,
                **(incident_writer_options or {}),
            )
        self._watcher = PodWatcher(
            PodsApi(api),
            node_name,
            self.cache,
            self._changes,
            watch_timeout_s=watch_timeout_s,
            backoff_max_s=backoff_max_s,
        )
        cache_live = functools.partial(_in_step, self.cache, self._watcher.watching)
        self.sink = KubeSink(
            node_name,
            self.cache,
            self.publisher,
            annotate,
            cache_live,
            ReportHint(),
            self.incidents,
        )
        self.warnings = WarningEvents(node_name, self.cache, self.publisher, cache_live)

    def start(self) -> None:
        """Start the watcher, publisher, verifier and writer threads (all daemon threads), each
        given its own object and the stop event."""
        self._changes.since_wall_s = time.time()  # before the watcher's thread reads it
        threads = []
        for name, target in (
            ("oomwatch-kube-pods", self._watcher.run),
            ("oomwatch-kube-events", self.publisher.run),
            ("oomwatch-kube-verify", self._verifier.run),
            *((("oomwatch-kube-incidents", self.incidents.run),) if self.incidents else ()),
        ):
            thread = threading.Thread(target=target, args=(self._stop,), name=name, daemon=True)
            thread.start()
            threads.append(thread)
        self._threads = tuple(threads)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Give queued Events up to `timeout_s` to go out (if the API answers), then stop."""
        deadline = time.monotonic() + timeout_s
        while (
            self._threads
            and self.publisher.reachable
            and (self.publisher.pending() or self._incidents_pending())
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        self._stop.set()
        self._watcher.stop()
        self.publisher.wake()
        if self.incidents is not None:
            self.incidents.wake()
        for thread in self._threads:
            thread.join(timeout_s)

    def _incidents_pending(self) -> bool:
        writer = self.incidents
        return writer is not None and writer.available and writer.pending() > 0

    def healthy(self) -> bool:
        """Liveness: our threads run (an unreachable API is not unhealthy: restarts do not help)."""
        return all(t.is_alive() for t in self._threads) or not self._threads

    @property
    def connected(self) -> bool:
        """Whether the pod watch currently reaches the API server."""
        return self._watcher.watching.is_set()
