"""The seams of the daemon pipeline: source -> decode -> incident -> enrich -> store -> sinks.

Adapters (Kubernetes, probe files, metrics, logs, Events) plug in through these two protocols,
so the pipeline itself never imports a client library.
"""

from __future__ import annotations

from typing import Protocol

from oomwatch.incident import Incident


class Enricher(Protocol):
    """Adds facts to an incident before it is stored (pod names, allocator state, ...)."""

    def enrich(self, incident: Incident) -> bool:
        """Add what is known now; return False to ask the pipeline to retry later.

        The pipeline retries a deferred incident on each tick until a bounded deadline, then
        stores and emits it with whatever was known: an incident is never dropped.
        """
        ...


class Sink(Protocol):
    """Publishes a stored incident (log line, metric, Event, annotation)."""

    def emit(self, incident: Incident) -> None:
        """Publish one incident; must not raise on remote failures (queue and retry instead)."""
        ...

    def close(self) -> None:
        """Flush and release resources at shutdown."""
        ...
