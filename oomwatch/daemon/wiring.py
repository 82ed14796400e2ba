"""How the agent opens what it may run without: the boot id, Kubernetes (and the metric
labels its pod cache gives), the probe directory, the crash-loop history.  Each failure is
logged and leaves the agent running without that part (standalone, no allocator join, no
history), never stopped."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import UTC, datetime

from oomwatch.cgroups import WatchedCgroup
from oomwatch.daemon.cgroup_view import CgroupView
from oomwatch.daemon.config import DaemonConfig
from oomwatch.daemon.heartbeat import Heartbeat
from oomwatch.diagnosis.history import History
from oomwatch.diagnosis.trends import CRASH_LOOP_WINDOW_S
from oomwatch.incident import Incident, TimelineSample
from oomwatch.sinks.metrics import Metrics, SeriesLabels
from oomwatch.sources.kmsg import read_boot_id
from oomwatch.stages import ClosingEnricher, EventLogger, FrameworkSource, KubeLink
from oomwatch.store import IncidentStore


def boot_id(log: EventLogger) -> str | None:
    try:
        return read_boot_id()
    except OSError as exc:
        log.error("boot_id_unreadable", error=str(exc))
        return None


def connect_kube(
    config: DaemonConfig,
    submit: Callable[[Incident], None],
    kernel_kills_for: Callable[[str, float, float], int],
    log: EventLogger,
) -> KubeLink | None:
    """Kubernetes, or None (standalone) when no cluster config is found."""
    try:
        from oomwatch.kube import KubeIntegration

        kube = KubeIntegration(
            config.node_name,
            annotate=config.annotate_pods,
            submit=submit,
            kernel_kills_for=kernel_kills_for,
            incident_retention_s=config.incident_retention_days * 86400,
            incident_writer_options={"max_per_namespace": config.incident_objects_per_namespace},
        )
    except Exception as exc:
        log.warning("standalone", reason=f"no Kubernetes cluster reachable: {exc}")
        return None
    link: KubeLink = kube
    return link


def labels_for(kube: KubeLink | None) -> Callable[[str | None, str | None], SeriesLabels | None]:
    """(Any thread) a container's metric labels, from the pod cache (read under its lock)."""

    def labels(pod_uid: str | None, container_id: str | None) -> SeriesLabels | None:
        if not pod_uid:
            return None
        info = kube.cache.get(pod_uid) if kube is not None else None
        if info is None:
            return SeriesLabels(pod_uid=pod_uid)
        found = info.container_by_id(container_id) if container_id else None
        return SeriesLabels(
            info.namespace,
            info.name,
            found.name if found is not None else "",
            pod_uid,
            info.owner_name or "",
            (info.owner_kind or "").lower(),
        )

    return labels


class MemoryGauges:
    """(The cgroup worker's thread) each sample pass's per-container memory gauges, labelled
    from the pod cache; series of gone pods age out.  `labels_for` is set before the worker
    starts (the pod cache comes after the worker is made)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self.labels_for = labels_for(None)

    def __call__(
        self,
        samples: list[tuple[WatchedCgroup, TimelineSample]],
        now_wall: float,
        view: CgroupView,
    ) -> None:
        for cg, sample in samples:
            labels = self.labels_for(cg.identity.pod_uid, cg.identity.container_id)
            if labels is not None:
                self._metrics.set_container_memory(
                    labels, sample.usage_bytes, sample.limit_bytes, sample.working_set_bytes
                )
        self._metrics.forget_stale(now_wall)


def health(
    heartbeat: Heartbeat,
    stale_s: float,
    cgroups_alive: Callable[[], bool],
    kube: KubeLink | None,
) -> Callable[[], bool]:
    """(HTTP thread) the agent is healthy: the loop turned lately (`stale_s`, less its CPU
    waits), the cgroup worker runs, and Kubernetes (if any) is connected."""

    def healthy() -> bool:
        alive = heartbeat.stale_s() < stale_s and cgroups_alive()
        return alive and (kube is None or bool(kube.healthy()))

    return healthy


def open_probe(
    config: DaemonConfig, log: EventLogger
) -> tuple[ClosingEnricher, FrameworkSource] | None:
    """The probe directory's allocator join and framework-OOM source, or None."""
    probe_dir = config.probe_dir
    if probe_dir is None:
        return None
    if not probe_dir.is_dir():
        log.warning("probe_dir_missing", path=str(probe_dir))
        return None
    try:
        from oomwatch.daemon.probe_worker import ProbeWorker
        from oomwatch.probe.framework import FrameworkOomSource
        from oomwatch.probe.join import ProbeEnricher
        from oomwatch.probe.reader import ProbeDirReader, ReaderLimits
    except ImportError as exc:
        log.warning("probe_unavailable", error=str(exc))
        return None
    # One reader for both: one parse cache and one byte budget for every file, made and
    # held by the worker's thread, off the kernel log's loop.
    limits = ReaderLimits(allowed_uids=config.probe_allowed_uids)
    walks = ProbeWorker(
        functools.partial(ProbeDirReader, probe_dir, limits), config.sample_interval_s
    )
    source: FrameworkSource = FrameworkOomSource(
        probe_dir, reader=walks, pod_dirs=config.probe_pod_dirs
    )
    enricher: ClosingEnricher = ProbeEnricher(
        probe_dir, reader=walks, pod_dirs=config.probe_pod_dirs
    )
    return enricher, source


def history(store: IncidentStore, log: EventLogger) -> History:
    """The crash-loop window's stored kills, so a restarted agent diagnoses the next kill
    of a crash-looping container as `oomwatch report --store` does."""
    since = datetime.fromtimestamp(time.time() - CRASH_LOOP_WINDOW_S, UTC)
    remembered = History()
    try:
        remembered.remember_all(store.iter_query(since=since))
    except Exception:
        log.exception("store_history_unreadable")
    return remembered
