"""The log sink: one JSON line per incident on stdout (`kubectl logs`), and operational logs.

The incident's line (`event: oom_kill`) leads with `message`, the diagnosis's verdict, then
the finding codes and the recommendation, the killed pod under OpenTelemetry attribute names
(`k8s.pod.name`, ...; never the agent's own `namespace`/`pod` stream labels) and the
evidence, sizes in `_bytes` keys; a field that is not known is absent, never null.

Both go through one pipeline (`eventlog`) so an operator greps one stream; stdlib `logging`
records of other modules (Kubernetes client, metrics server) are rendered the same way.
Every string that a pod or the kernel could have chosen (process names, cgroup paths,
notes) has its control characters escaped: a name with a newline must not forge a line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TextIO

from oomwatch.incident import AttributionCandidate, Incident
from oomwatch.sinks import eventlog
from oomwatch.stages import EventLogger

INCIDENT_EVENT = "oom_kill"
LOGGER_NAME = "oomwatch"


def setup_logging(log_format: str = "json", stream: TextIO | None = None) -> None:
    """The operational log and the stdlib root logger write one stream in one format."""
    eventlog.configure(log_format, stream)


def get_logger() -> EventLogger:
    """The agent's operational logger (`setup_logging` decides where it writes)."""
    return eventlog.EventLog(LOGGER_NAME)


# Where the killed pod's identity goes: OpenTelemetry's resource attribute names, so it never
# collides with the agent pod's own stream labels (`namespace`, `pod`, `container`) that
# Loki and Elastic put on every line the agent writes.
_OWNER_KEYS = {
    "Deployment": "k8s.deployment.name",
    "ReplicaSet": "k8s.replicaset.name",
    "StatefulSet": "k8s.statefulset.name",
    "DaemonSet": "k8s.daemonset.name",
    "Job": "k8s.job.name",
    "CronJob": "k8s.cronjob.name",
}
_BREAKDOWN = ("anon", "file", "shmem", "thp", "kernel")


def incident_fields(incident: Incident) -> dict[str, Any]:
    """The `oom_kill` line: `message` (the verdict), finding codes and the recommendation
    from the incident's one diagnosis, then the victim under OpenTelemetry names and the
    evidence.  Sizes are bytes in `_bytes` keys; what is unknown is left out (no nulls).

    `memcg_sampled` says usage, limit and breakdown are the daemon's sample, not the kernel's.
    """
    victim = incident.victim
    usage = incident.memcg
    k8s = incident.k8s
    parts = incident.breakdown_bytes
    fields: dict[str, Any] = {
        "message": incident.verdict or f"{incident.kind} OOM incident (not diagnosed)",
        "verdict_code": incident.verdict_code,
        "findings": [f.code for f in incident.findings] or None,
        "recommendation": _present_dict(incident.recommendation, skip=("based_on",)),
        "kind": incident.kind,
        "k8s.node.name": incident.node,
        "k8s.namespace.name": k8s.namespace if k8s else None,
        "k8s.pod.name": k8s.pod if k8s else None,
        "k8s.pod.uid": incident.pod_uid,
        "k8s.container.name": k8s.container if k8s else None,
        "container.id": incident.container_id,
        "process.pid": victim.pid if victim else None,
        "process.executable.name": victim.comm if victim else None,
        "victim_anon_rss_bytes": victim.anon_rss_bytes if victim else None,
        "victims": incident.victim_count,
        "victim_pids": [v.pid for v in incident.victims] if len(incident.victims) > 1 else None,
        "qos_class": incident.qos_class,
        "limit_scope": incident.limit_scope,
        "oom_memcg": incident.oom_memcg,
        "task_memcg": incident.task_memcg,
        "usage_bytes": usage.usage_bytes if usage else None,
        "limit_bytes": usage.limit_bytes if usage else None,
        "breakdown": {f"{n}_bytes": getattr(parts, n) for n in _BREAKDOWN} if parts else None,
        "memcg_sampled": incident.memcg_sampled,
        "group_kill": incident.group_kill,
        "oom_group_enabled": incident.oom_group_enabled,
        "container_survived": incident.container_survived,
        "kmsg_missing": incident.kmsg_missing,
        "header_suppressed": incident.header_suppressed,
        "kernel_time_s": incident.kernel_time_s,
        "wall_time": incident.wall_time,
        "detected_at": incident.detected_at,
        "notes": list(incident.notes) or None,
    }
    owner_key = _OWNER_KEYS.get(k8s.owner_kind or "") if k8s else None
    if owner_key is not None and k8s is not None:
        fields[owner_key] = k8s.owner_name
    if incident.timeline is not None:
        fields["peak_bytes"] = incident.timeline.peak_bytes
        fields["growth_bytes_per_second"] = incident.timeline.growth_bytes_per_second
    if incident.forecast is not None:  # was it predicted (MemoryLimitApproaching), how early
        fields["predicted"] = incident.forecast.predicted
        fields["forecast_lead_time_s"] = incident.forecast.lead_time_seconds
    attribution = incident.attribution
    if attribution is not None:
        fields["attribution"] = attribution.confidence
        fields["attribution_method"] = attribution.method
        if attribution.confidence != "certain":
            fields["attribution_reason"] = attribution.reason
            fields["candidates"] = [_candidate(c) for c in attribution.candidates]
    return _present_dict(fields) or {}


def _candidate(candidate: AttributionCandidate) -> dict[str, Any]:
    return (
        _present_dict(
            {
                "cgroup": candidate.cgroup,
                "k8s.namespace.name": candidate.namespace,
                "k8s.pod.name": candidate.pod,
                "k8s.pod.uid": candidate.pod_uid,
                "container.id": candidate.container_id,
            }
        )
        or {}
    )


def _present_dict(
    data: Mapping[str, Any] | None, skip: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """`data` without its None values (nested dicts too) and `skip` keys; None if empty."""
    if data is None:
        return None
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            value = _present_dict(value)
        if value is not None:
            out[key] = value
    return out or None


class LogSink:
    """Sink: the `oom_kill` JSON line.  Never raises into the pipeline."""

    def __init__(self, logger: EventLogger | None = None) -> None:
        self._log = logger if logger is not None else get_logger()

    def emit(self, incident: Incident) -> None:
        try:
            self._log.warning(INCIDENT_EVENT, **incident_fields(incident))
        except Exception:
            logging.getLogger(LOGGER_NAME).exception("incident_log_failed")

    def close(self) -> None:
        """Nothing buffered: each line is written as it is logged."""
