"""Prometheus metrics for OOM kills and container memory, served with `/healthz` on one port.

Names and labels are the agreed contract (alert rules and the dashboard use them).  Label
values come only from Kubernetes identity (namespace, pod, container, pod UID, and the
workload that owns the pod where the pod cache knows it) and from fixed vocabularies (kind,
scope, framework, finding codes), never from process names: a pod could otherwise mint
unbounded series.  The workload labels add no series (a pod has one owner).  Series of
containers not seen for a grace period are removed.  No `_created` series: one more series
per counter that no rule or dashboard reads.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from oomwatch import __version__
from oomwatch.daemon import http_server as http
from oomwatch.diagnosis import CODES
from oomwatch.incident import LIMIT_SCOPES, Incident, is_kernel_kill, kill_epoch_s
from oomwatch.probe import schema as probe_schema

disable_created_metrics()  # type: ignore[no-untyped-call]  # process-wide, as intended

# kubernetes-mixin's names for a pod's owner (namespace_workload_pod:kube_pod_owner:relabel).
IDENTITY_LABELS = ("namespace", "pod", "container", "pod_uid", "workload", "workload_type")
FRAMEWORKS = frozenset(probe_schema.FRAMEWORKS)  # the closed set a probe file may name
GAUGE_GRACE_S = 300.0  # a gone container's memory gauges linger this long
COUNTER_GRACE_S = 3600.0  # its kill counters longer, so alerts on increase() still see them


class SeriesLabels(NamedTuple):
    """The identity labels of a container's series ("" when unknown), in label order.

    `workload`/`workload_type`: the pod's controlling owner (`Deployment` for a
    ReplicaSet named by its pod-template-hash) as `web` / `deployment`."""

    namespace: str = ""
    pod: str = ""
    container: str = ""
    pod_uid: str = ""
    workload: str = ""
    workload_type: str = ""

    @classmethod
    def of(cls, incident: Incident) -> SeriesLabels:
        k8s = incident.k8s
        if k8s is None:
            return cls(pod_uid=incident.pod_uid or "")
        return cls(
            k8s.namespace or "",
            k8s.pod or "",
            k8s.container or "",
            incident.pod_uid or "",
            k8s.owner_name or "",
            (k8s.owner_kind or "").lower(),
        )


def attribution_label(incident: Incident) -> str:
    """`certain` when the victim's cgroup is known, `ambiguous` when the kernel's evidence
    left several (the series then carries no pod: none is charged), `unknown` when none."""
    attribution = incident.attribution
    return "certain" if attribution is None else attribution.confidence


class _Memory:
    """A container's memory gauges as plain values (None: the series is absent)."""

    __slots__ = ("limit", "usage", "working_set")

    def __init__(self, usage: int, working_set: int, limit: int | None) -> None:
        self.usage = usage
        self.working_set = working_set
        self.limit = limit


class _MemoryGauges:
    """The per-container memory gauges, read from `_Memory` values when scraped: a
    `prometheus_client` child per series held ~2.7 KiB per container (its lock, value,
    label copies and kwargs), a value here is ~100 bytes.  Same families, help and labels."""

    FAMILIES = (
        (
            "oomwatch_container_memory_usage_bytes",
            "Sampled memory usage of the container cgroup (includes page cache).",
        ),
        (
            "oomwatch_container_memory_working_set_bytes",
            "Sampled working set of the container cgroup: usage minus inactive file cache, the"
            " part the kernel cannot simply drop before it kills.",
        ),
        ("oomwatch_container_memory_limit_bytes", "Memory limit of the container cgroup."),
    )

    def __init__(self, values: dict[SeriesLabels, _Memory], lock: threading.Lock) -> None:
        self._values = values
        self._lock = lock

    def describe(self) -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily(name, text, labels=IDENTITY_LABELS) for name, text in self.FAMILIES
        ]

    def collect(self) -> list[GaugeMetricFamily]:
        with self._lock:
            rows = [
                (labels, (m.usage, m.working_set, m.limit)) for labels, m in self._values.items()
            ]
        families = []
        for column, (name, text) in enumerate(self.FAMILIES):
            family = GaugeMetricFamily(name, text, labels=IDENTITY_LABELS)
            for labels, values in rows:
                value = values[column]
                if value is not None:
                    family.add_metric(labels, float(value))
            families.append(family)
        return families


class Metrics:
    """The metrics sink (a `Sink`): counts incidents, holds memory gauges, serves `/metrics`."""

    def __init__(
        self,
        *,
        gauge_grace_s: float = GAUGE_GRACE_S,
        counter_grace_s: float = COUNTER_GRACE_S,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._clock = clock or time.time
        self._gauge_grace_s = gauge_grace_s
        self._counter_grace_s = counter_grace_s
        self._lock = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ids = IDENTITY_LABELS
        self.oom_kills = Counter(
            "oomwatch_oom_kills",
            "Kernel OOM kills, one per victim process.",
            [*ids, "kind", "scope", "attribution"],
            registry=r,
        )
        self.oom_incidents = Counter(
            "oomwatch_oom_incidents",
            "Kernel OOM kill incidents, one per kill of the container (a group kill counts once).",
            [*ids, "kind", "scope", "attribution"],
            registry=r,
        )
        self.group_oom_kills = Counter(
            "oomwatch_group_oom_kills",
            "memory.oom.group kills, one per group kill.",
            ids,
            registry=r,
        )
        self.child_process_oom_kills = Counter(
            "oomwatch_child_process_oom_kills",
            "OOM kills where the container survived (a worker died, PID 1 lives on).",
            ids,
            registry=r,
        )
        self.oom_findings = Counter(
            "oomwatch_oom_findings",
            "Kernel OOM kill incidents by what their diagnosis found (finding code), one per"
            " finding of each.",
            [*ids, "finding"],
            registry=r,
        )
        self.framework_oom = Counter(
            "oomwatch_framework_oom",
            "CUDA/TensorFlow out-of-memory errors reported by the probe.",
            [*ids, "framework"],
            registry=r,
        )
        self.kmsg_records_lost = Counter(
            "oomwatch_kmsg_records_lost",
            "/dev/kmsg records overwritten before they were read.",
            registry=r,
        )
        self.oom_reports_suppressed = Counter(
            "oomwatch_oom_reports_suppressed",
            "OOM kills whose report the kernel rate-limited or that never reached the log.",
            registry=r,
        )
        self.last_oom_kill = Gauge(
            "oomwatch_last_oom_kill_timestamp_seconds",
            "Wall clock of the latest OOM kill on this node.",
            registry=r,
        )
        self._memory: dict[SeriesLabels, _Memory] = {}
        r.register(_MemoryGauges(self._memory, self._lock))
        self.seconds_to_oom = Gauge(
            "oomwatch_container_seconds_to_oom",
            "Predicted seconds until the container's unreclaimable memory reaches its limit,"
            " while a pre-OOM warning is in force (absent otherwise).",
            ids,
            registry=r,
        )
        Gauge(
            "oomwatch_build_info", "oomwatch version (always 1).", ["version"], registry=r
        ).labels(__version__).set(1)
        # Last touch per identity, and every labelled series it owns (the memory gauges are
        # in `_memory`).
        self._seen_s: dict[SeriesLabels, float] = {}
        self._series: dict[SeriesLabels, set[tuple[Any, tuple[str, ...]]]] = {}
        self._server: http.LoopServer | None = None
        self._last_kill_s = 0.0

    # --- Sink ---------------------------------------------------------------------------------

    def emit(self, incident: Incident) -> None:
        labels = SeriesLabels.of(incident)
        with self._lock:
            self._touch(labels)
            if incident.kind == "framework":
                framework = (incident.allocator or {}).get("framework")
                name = framework if framework in FRAMEWORKS else ""
                self._inc(self.framework_oom, labels, (name,), 1)
                return
            if not is_kernel_kill(incident.kind):
                return  # evictions and false OOMKilled reports are not kernel kills
            kills = max(1, incident.victim_count)
            scope = incident.limit_scope if incident.limit_scope in LIMIT_SCOPES else ""
            how = (incident.kind, scope or "", attribution_label(incident))
            self._inc(self.oom_kills, labels, how, kills)
            self._inc(self.oom_incidents, labels, how, 1)
            if incident.group_kill and incident.continues_group_kill_s is None:
                self._inc(self.group_oom_kills, labels, (), 1)  # a continuation is its kill's
            if incident.container_survived:
                self._inc(self.child_process_oom_kills, labels, (), 1)
            for code in {f.code for f in incident.findings} & CODES:
                self._inc(self.oom_findings, labels, (code,), 1)
            if incident.header_suppressed or incident.kmsg_missing:
                self.oom_reports_suppressed.inc(kills)
            # Incidents may come out of order (backlog, deferred enrichment): keep the latest.
            self._last_kill_s = max(self._last_kill_s, _kill_wall_time(incident))
            self.last_oom_kill.set(self._last_kill_s)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop_serving()

    # --- counters and gauges fed by the daemon --------------------------------------------

    def add_kmsg_lost(self, n: int) -> None:
        if n > 0:
            self.kmsg_records_lost.inc(n)

    def add_reports_suppressed(self, n: int) -> None:
        if n > 0:
            self.oom_reports_suppressed.inc(n)

    def set_container_memory(
        self,
        identity_labels: SeriesLabels,
        usage_bytes: int,
        limit_bytes: int | None,
        working_set_bytes: int | None = None,
    ) -> None:
        """Update a container's gauges (the limit series is absent while it is unlimited;
        the working set is the usage where the cgroup does not say its inactive file).

        Called for every container every second, so the labelled children are cached.
        """
        working_set = usage_bytes if working_set_bytes is None else working_set_bytes
        with self._lock:
            self._seen_s[identity_labels] = self._clock()
            memory = self._memory.get(identity_labels)
            if memory is None:
                self._memory[identity_labels] = _Memory(usage_bytes, working_set, limit_bytes)
                return
            memory.usage = usage_bytes
            memory.working_set = working_set
            memory.limit = limit_bytes

    def set_seconds_to_oom(self, identity_labels: SeriesLabels, seconds: float | None) -> None:
        """A container's forecast time to its limit; None removes the series (no warning)."""
        with self._lock:
            if seconds is None:
                self._remove(self.seconds_to_oom, identity_labels)
                self._series.get(identity_labels, set()).discard(
                    (self.seconds_to_oom, identity_labels)
                )
                return
            self._series.setdefault(identity_labels, set())
            self._own(identity_labels, self.seconds_to_oom, identity_labels)
            self.seconds_to_oom.labels(*identity_labels).set(round(seconds, 1))

    def forget_stale(self, now_s: float | None = None) -> int:
        """Drop series of containers not seen lately (gauges first, counters later).

        `now_s` is wall-clock seconds (the default clock); returns how many series went.
        """
        now = self._clock() if now_s is None else now_s
        removed = 0
        with self._lock:
            for labels, seen in list(self._seen_s.items()):
                age = now - seen
                if age <= self._gauge_grace_s:
                    continue
                owned = self._series.get(labels, set())  # none: memory gauges only
                memory = self._memory.pop(labels, None)
                if memory is not None:  # usage and working set, and the limit if set
                    removed += 2 if memory.limit is None else 3
                for metric, values in list(owned):
                    is_gauge = metric is self.seconds_to_oom
                    if is_gauge or age > self._counter_grace_s:
                        self._remove(metric, values)
                        owned.discard((metric, values))
                        removed += 1
                if not owned:
                    self._series.pop(labels, None)
                    del self._seen_s[labels]
        return removed

    # --- HTTP -----------------------------------------------------------------------------------

    def serve(self, host: str, port: int, health: Callable[[], bool]) -> tuple[str, int]:
        """Serve `/metrics` and `/healthz` from a background thread; returns the bound address.

        The server is bounded in threads and connection time (oomwatch.daemon.http_server)."""
        registry = self.registry
        server = http.serve(
            host,
            port,
            {
                "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
                "/healthz": http.health_route(health),
            },
            name="oomwatch-metrics",
        )
        self._server = server
        bound_host, bound_port = server.server_address[:2]
        return str(bound_host), int(bound_port)

    # --- internals ------------------------------------------------------------------------------

    def _touch(self, labels: SeriesLabels) -> None:
        self._seen_s[labels] = self._clock()
        self._series.setdefault(labels, set())

    def _own(self, labels: SeriesLabels, metric: Any, values: tuple[str, ...]) -> None:
        self._series[labels].add((metric, values))

    def _inc(self, metric: Any, labels: SeriesLabels, extra: tuple[str, ...], n: int) -> None:
        values = (*labels, *extra)
        metric.labels(*values).inc(n)
        self._own(labels, metric, values)

    @staticmethod
    def _remove(metric: Any, values: tuple[str, ...]) -> None:
        with contextlib.suppress(KeyError):  # never created (e.g. always unlimited)
            metric.remove(*values)


def _kill_wall_time(incident: Incident) -> float:
    """Seconds since the epoch of the kill: the record's wall time, else when we saw it."""
    killed_at = kill_epoch_s(incident)
    return killed_at if killed_at is not None else time.time()
