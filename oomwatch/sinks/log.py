"""The log sink: one JSON line per incident on stdout (`kubectl logs`), and operational logs.

Both go through one structlog pipeline so an operator greps one stream; stdlib `logging`
records of other modules (Kubernetes client, metrics server) are rendered the same way.
Every string that a pod or the kernel could have chosen (process names, cgroup paths,
notes) has its control characters escaped: a name with a newline must not forge a line.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

from oomwatch.incident import Incident
from oomwatch.sanitize import escape_control

INCIDENT_EVENT = "oom_kill"
LOGGER_NAME = "oomwatch"


def _escape_strings(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Processor: escape control characters in every string value, however nested."""
    return {k: _escaped(v) for k, v in event_dict.items()}


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return escape_control(value)
    if isinstance(value, list | tuple):
        return [_escaped(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _escaped(v) for k, v in value.items()}
    return value


def setup_logging(log_format: str = "json", stream: TextIO | None = None) -> None:
    """Configure structlog and the stdlib root logger to write one stream in one format."""
    stream = stream if stream is not None else sys.stdout
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        _escape_strings,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, renderer],
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def get_logger() -> Any:
    return structlog.get_logger(LOGGER_NAME)


def incident_fields(incident: Incident) -> dict[str, Any]:
    """The log line's fields: identity, victim, limit, usage, breakdown and the flags.

    `memcg_sampled` says usage, limit and breakdown are the daemon's sample, not the kernel's.
    """
    victim = incident.victim
    usage = incident.memcg
    k8s = incident.k8s
    fields: dict[str, Any] = {
        "kind": incident.kind,
        "node": incident.node,
        "namespace": k8s.namespace if k8s else None,
        "pod": k8s.pod if k8s else None,
        "container": k8s.container if k8s else None,
        "pod_uid": incident.pod_uid,
        "container_id": incident.container_id,
        "qos_class": incident.qos_class,
        "victim_pid": victim.pid if victim else None,
        "victim_comm": victim.comm if victim else None,
        "victim_anon_rss_kb": victim.anon_rss_kb if victim else None,
        "victims": len(incident.victims),
        "limit_scope": incident.limit_scope,
        "oom_memcg": incident.oom_memcg,
        "task_memcg": incident.task_memcg,
        "usage_bytes": usage.usage_kb * 1024 if usage and usage.usage_kb is not None else None,
        "limit_bytes": usage.limit_kb * 1024 if usage and usage.limit_kb is not None else None,
        "breakdown": _present(incident.breakdown_bytes),
        "memcg_sampled": incident.memcg_sampled,
        "group_kill": incident.group_kill,
        "oom_group_enabled": incident.oom_group_enabled,
        "container_survived": incident.container_survived,
        "kmsg_missing": incident.kmsg_missing,
        "header_suppressed": incident.header_suppressed,
        "kernel_time_s": incident.kernel_time_s,
        "wall_time": incident.wall_time,
        "detected_at": incident.detected_at,
    }
    attribution = incident.attribution
    if attribution is not None:
        fields["attribution"] = attribution.confidence
        fields["attribution_method"] = attribution.method
        if attribution.confidence != "certain":
            fields["attribution_reason"] = attribution.reason
            fields["candidates"] = [
                {k: v for k, v in vars_of(c).items() if v is not None}
                for c in attribution.candidates
            ]
    if incident.timeline is not None:
        fields["peak_bytes"] = incident.timeline.peak_bytes
        fields["growth_bytes_per_second"] = incident.timeline.growth_bytes_per_second
    if incident.forecast is not None:  # was it predicted (MemoryLimitApproaching), how early
        fields["predicted"] = incident.forecast.predicted
        fields["forecast_lead_time_s"] = incident.forecast.lead_time_seconds
    if len(incident.victims) > 1:
        fields["victim_pids"] = [v.pid for v in incident.victims]
    if incident.notes:
        fields["notes"] = list(incident.notes)
    return fields


def _present(obj: Any) -> dict[str, Any] | None:
    if obj is None:
        return None
    return {name: value for name, value in vars_of(obj).items() if value is not None}


def vars_of(obj: Any) -> dict[str, Any]:
    """The fields of a slotted dataclass instance."""
    return {name: getattr(obj, name) for name in obj.__slots__}


class LogSink:
    """Sink: the `oom_kill` JSON line.  Never raises into the pipeline."""

    def __init__(self, logger: Any = None) -> None:
        self._log = logger if logger is not None else get_logger()

    def emit(self, incident: Incident) -> None:
        try:
            self._log.warning(INCIDENT_EVENT, **incident_fields(incident))
        except Exception:
            logging.getLogger(LOGGER_NAME).exception("could not log an incident")

    def close(self) -> None:
        """Nothing buffered: each line is written as it is logged."""
