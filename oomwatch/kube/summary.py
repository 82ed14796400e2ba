"""What an agent's Event says for the fleet view, in one annotation (`oomwatch.io/summary`).

The note is for people; `kubectl oomwatch top` needs the diagnosis as data: the workload (the
API's owner of the pod, never a name a pod wrote), which limit, the finding codes, the top
recommendation and, for a kill, whether a warning came first.  One compact JSON object per
Event, capped in size; the agent writes it (`kill_summary`, `warning_summary`) and the plugin
reads it (`parse_summary`), so both sides share this one definition.  It speaks from the
stored incident's one diagnosis (its findings and recommendation as stored, crash-loop
history included), never a second `diagnose()`.  Pure and free of the Kubernetes client:
the plugin's zipapp imports it.
"""

from __future__ import annotations

import json
from typing import Any

from oomwatch.diagnosis.evidence import limit_bytes, usage_bytes
from oomwatch.incident import Incident
from oomwatch.sanitize import escape_control

REPORTING_CONTROLLER = "oomwatch.io/agent"  # every agent Event's reportingController
SUMMARY_ANNOTATION = "oomwatch.io/summary"
SUMMARY_VERSION = 1
RECOMMENDATION_MAX_CHARS = 400
MAX_FINDINGS = 8


def workload_name(owner_kind: str | None, owner_name: str | None, pod: str) -> str:
    """`Deployment/web` (the pod decoder already maps a ReplicaSet to its Deployment), or
    `Pod/<name>` for a pod nothing owns."""
    return f"{owner_kind}/{owner_name}" if owner_kind and owner_name else f"Pod/{pod}"


def kill_summary(incident: Incident, workload: str, container: str | None, reason: str) -> str:
    """The summary of a kill's Event: the stored diagnosis (findings, recommendation)."""
    rec = incident.recommendation or {}
    message = rec.get("message")
    summary: dict[str, Any] = {
        "v": SUMMARY_VERSION,
        "workload": workload,
        "container": container,
        "reason": reason,
        "kind": incident.kind,
        "scope": incident.limit_scope,
        "verdict": incident.verdict_code,  # the row `kubectl oomwatch top` ranks by
        "findings": [f.code for f in incident.findings[:MAX_FINDINGS]],
        "recommendation": _clip(message) if isinstance(message, str) else None,
        "limit_will_not_help": rec.get("limit_will_not_help"),
        "recommended_limit_bytes": rec.get("memory_limit_bytes"),
        "limit_bytes": limit_bytes(incident),
        "usage_bytes": usage_bytes(incident),
        "node": incident.node,
    }
    forecast = incident.forecast
    if forecast is not None:
        summary["predicted"] = forecast.predicted
        summary["lead_time_seconds"] = forecast.lead_time_seconds
    return _encode(summary)


def warning_summary(
    details: dict[str, Any], workload: str, container: str | None, node: str
) -> str:
    """The summary of a `MemoryLimitApproaching` Event (details: the forecast's fields)."""
    return _encode(
        {
            "v": SUMMARY_VERSION,
            "workload": workload,
            "container": container,
            "reason": "MemoryLimitApproaching",
            "kind": "forecast",
            "scope": "container",
            "seconds_to_oom": _round(details.get("seconds_to_oom")),
            "confidence": _round(details.get("confidence")),
            "limit_bytes": details.get("limit_bytes"),
            "unreclaimable_bytes": details.get("unreclaimable_bytes"),
            "slope_bytes_per_second": _round(details.get("slope_bytes_per_second")),
            "node": node,
        }
    )


def parse_summary(text: object) -> dict[str, Any] | None:
    """The summary annotation of an Event, or None when absent or not ours."""
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("v") != SUMMARY_VERSION:
        return None
    return data


def _encode(summary: dict[str, Any]) -> str:
    compact = {k: v for k, v in summary.items() if v is not None}
    return json.dumps(compact, separators=(",", ":"), sort_keys=True, ensure_ascii=True)


def _clip(text: str) -> str:
    text = escape_control(text)
    if len(text) <= RECOMMENDATION_MAX_CHARS:
        return text
    return text[: RECOMMENDATION_MAX_CHARS - 3] + "..."


def _round(value: object) -> float | None:
    return round(float(value), 3) if isinstance(value, int | float) else None
