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

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from oomwatch import __version__
from oomwatch.daemon import http_server as http
from oomwatch.diagnosis import CODES
from oomwatch.incident import LIMIT_SCOPES, Incident, is_kernel_kill, kill_epoch_s
from oomwatch.probe import schema as probe_schema
from oomwatch.sinks.exposition import CONTENT_TYPE, Family, FamilySnapshot, Sample, render

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
    """The per-container memory gauges, read from `_Memory` values when scraped: a value
    here is ~100 bytes, where a client library's child per series held ~2.7 KiB (its lock,
    value, label copies and kwargs)."""

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

    def __init__(self, values: dict[SeriesLabels, _Memory]) -> None:
        self._values = values

    def snapshot(self) -> list[FamilySnapshot]:
        """The three families' samples (the owner holds its lock)."""
        usage: list[Sample] = []
        working_set: list[Sample] = []
        limit: list[Sample] = []
        for labels, memory in self._values.items():
            usage.append((labels, float(memory.usage)))
            working_set.append((labels, float(memory.working_set)))
            if memory.limit is not None:
                limit.append((labels, float(memory.limit)))
        columns = (usage, working_set, limit)
        return [
            FamilySnapshot(name, text, "gauge", IDENTITY_LABELS, samples)
            for (name, text), samples in zip(self.FAMILIES, columns, strict=True)
        ]


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
        ids = IDENTITY_LABELS
        how = (*ids, "kind", "scope", "attribution")
        self.oom_kills = Family(
            "oomwatch_oom_kills_total",
            "Kernel OOM kills, one per victim process.",
            "counter",
            how,
        )
        self.oom_incidents = Family(
            "oomwatch_oom_incidents_total",
            "Kernel OOM kill incidents, one per kill of the container (a group kill counts once).",
            "counter",
            how,
        )
        self.group_oom_kills = Family(
            "oomwatch_group_oom_kills_total",
            "memory.oom.group kills, one per group kill.",
            "counter",
            ids,
        )
        self.child_process_oom_kills = Family(
            "oomwatch_child_process_oom_kills_total",
            "OOM kills where the container survived (a worker died, PID 1 lives on).",
            "counter",
            ids,
        )
        self.oom_findings = Family(
            "oomwatch_oom_findings_total",
            "Kernel OOM kill incidents by what their diagnosis found (finding code), one per"
            " finding of each.",
            "counter",
            (*ids, "finding"),
        )
        self.framework_oom = Family(
            "oomwatch_framework_oom_total",
            "CUDA/TensorFlow out-of-memory errors reported by the probe.",
            "counter",
            (*ids, "framework"),
        )
        self.kmsg_records_lost = Family(
            "oomwatch_kmsg_records_lost_total",
            "/dev/kmsg records overwritten before they were read.",
            "counter",
        )
        self.oom_reports_suppressed = Family(
            "oomwatch_oom_reports_suppressed_total",
            "OOM kills whose report the kernel rate-limited or that never reached the log.",
            "counter",
        )
        self.last_oom_kill = Family(
            "oomwatch_last_oom_kill_timestamp_seconds",
            "Wall clock of the latest OOM kill on this node.",
            "gauge",
        )
        self._memory: dict[SeriesLabels, _Memory] = {}
        self._memory_gauges = _MemoryGauges(self._memory)
        self.seconds_to_oom = Family(
            "oomwatch_container_seconds_to_oom",
            "Predicted seconds until the container's unreclaimable memory reaches its limit,"
            " while a pre-OOM warning is in force (absent otherwise).",
            "gauge",
            ids,
        )
        build_info = Family(
            "oomwatch_build_info", "oomwatch version (always 1).", "gauge", ["version"]
        )
        build_info.set((__version__,), 1)
        # In the order a scrape lists them; the memory gauges come after `last_oom_kill`.
        self._families_before_memory = (
            self.oom_kills,
            self.oom_incidents,
            self.group_oom_kills,
            self.child_process_oom_kills,
            self.oom_findings,
            self.framework_oom,
            self.kmsg_records_lost,
            self.oom_reports_suppressed,
            self.last_oom_kill,
        )
        self._families_after_memory = (self.seconds_to_oom, build_info)
        # Last touch per identity, and every labelled series it owns (the memory gauges are
        # in `_memory`).
        self._seen_s: dict[SeriesLabels, float] = {}
        self._series: dict[SeriesLabels, set[tuple[Family, tuple[str, ...]]]] = {}
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
                self.oom_reports_suppressed.inc((), kills)
            # Incidents may come out of order (backlog, deferred enrichment): keep the latest.
            self._last_kill_s = max(self._last_kill_s, _kill_wall_time(incident))
            self.last_oom_kill.set((), self._last_kill_s)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop_serving()

    # --- counters and gauges fed by the daemon --------------------------------------------

    def add_kmsg_lost(self, n: int) -> None:
        if n > 0:
            with self._lock:
                self.kmsg_records_lost.inc((), n)

    def add_reports_suppressed(self, n: int) -> None:
        if n > 0:
            with self._lock:
                self.oom_reports_suppressed.inc((), n)

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
                self.seconds_to_oom.remove(identity_labels)
                self._series.get(identity_labels, set()).discard(
                    (self.seconds_to_oom, identity_labels)
                )
                return
            self._series.setdefault(identity_labels, set())
            self._own(identity_labels, self.seconds_to_oom, identity_labels)
            self.seconds_to_oom.set(identity_labels, round(seconds, 1))

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
                        metric.remove(values)
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
        server = http.serve(
            host,
            port,
            {
                "/metrics": lambda: (200, CONTENT_TYPE, self.exposition()),
                "/healthz": http.health_route(health),
            },
            name="oomwatch-metrics",
        )
        self._server = server
        bound_host, bound_port = server.server_address[:2]
        return str(bound_host), int(bound_port)

    def exposition(self) -> bytes:
        """What a scrape of `/metrics` reads: the families' samples taken under the lock,
        the text written outside it."""
        with self._lock:
            families = [family.snapshot() for family in self._families_before_memory]
            families += self._memory_gauges.snapshot()
            families += [family.snapshot() for family in self._families_after_memory]
        return render(families)

    # --- internals ------------------------------------------------------------------------------

    def _touch(self, labels: SeriesLabels) -> None:
        self._seen_s[labels] = self._clock()
        self._series.setdefault(labels, set())

    def _own(self, labels: SeriesLabels, metric: Family, values: tuple[str, ...]) -> None:
        self._series[labels].add((metric, values))

    def _inc(self, metric: Family, labels: SeriesLabels, extra: tuple[str, ...], n: int) -> None:
        values = (*labels, *extra)
        metric.inc(values, n)
        self._own(labels, metric, values)


def _kill_wall_time(incident: Incident) -> float:
    """Seconds since the epoch of the kill: the record's wall time, else when we saw it."""
    killed_at = kill_epoch_s(incident)
    return killed_at if killed_at is not None else time.time()
