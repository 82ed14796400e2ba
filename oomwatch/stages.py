"""The seams of the daemon pipeline: source -> decode -> incident -> enrich -> store -> sinks.

Adapters (Kubernetes, probe files, metrics, logs, Events) plug in through these protocols, so
the pipeline and the agent never import a client library; tests put fakes in their place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from oomwatch.incident import Incident

if TYPE_CHECKING:  # oomwatch.kube's package imports the Kubernetes client
    from oomwatch.kube.pods import PodInfo


class Enricher(Protocol):
    """Adds facts to an incident before it is stored (pod names, allocator state, ...)."""

    def enrich(self, incident: Incident) -> bool:
        """Add what is known now; return False to ask the pipeline to retry later.

        The pipeline retries a deferred incident on each tick until a bounded deadline, then
        stores and emits it with whatever was known: an incident is never dropped.
        """
        ...


class ClosingEnricher(Enricher, Protocol):
    """An enricher holding resources (files, caches) to release at shutdown."""

    def close(self) -> None: ...


class Sink(Protocol):
    """Publishes a stored incident (log line, metric, Event, annotation)."""

    def emit(self, incident: Incident) -> None:
        """Publish one incident; must not raise on remote failures (queue and retry instead)."""
        ...

    def close(self) -> None:
        """Flush and release resources at shutdown."""
        ...


class EventLogger(Protocol):
    """The operational log (structlog's logger): a stable snake_case event key, then fields.

    Keys, not sentences, so an operator's query (`event="sink_failed"`) survives rewording.
    """

    def info(self, event: str, **fields: Any) -> Any: ...

    def warning(self, event: str, **fields: Any) -> Any: ...

    def error(self, event: str, **fields: Any) -> Any: ...

    def exception(self, event: str, **fields: Any) -> Any: ...


class PodLookup(Protocol):
    """The pods of this node the agent knows, by UID."""

    def get(self, pod_uid: str) -> PodInfo | None: ...


class PodWarnings(Protocol):
    """Sends a pre-OOM warning (MemoryLimitApproaching) to a pod."""

    def warn(
        self, pod_uid: str, container_id: str | None, note: str, details: dict[str, Any]
    ) -> None: ...


class KubeLink(Protocol):
    """What the agent uses of the cluster (oomwatch.kube.KubeIntegration; a fake in tests)."""

    @property
    def enricher(self) -> Enricher: ...

    @property
    def sink(self) -> Sink: ...

    @property
    def warnings(self) -> PodWarnings: ...

    @property
    def cache(self) -> PodLookup: ...

    def start(self) -> None: ...

    def stop(self, timeout_s: float = 5.0) -> None: ...

    def healthy(self) -> bool: ...


class FrameworkSource(Protocol):
    """Framework OOMs (CUDA, TensorFlow) the trainers' probe files recorded, as incidents."""

    def poll(self, now_wall_s: float | None = None) -> list[Incident]: ...

    def close(self) -> None: ...
