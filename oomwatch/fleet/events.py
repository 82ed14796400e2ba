"""The agents' Events as the fleet view reads them: one `Sighting` per Event (pure parsing).

The plugin lists core/v1 Events with `reportingComponent=oomwatch.io/agent` (the field every
API server indexes, as `kubectl get events --field-selector` does); each Event stands for
`series.count` kills of one container with one reason.  The diagnosis comes from the
`oomwatch.io/summary` annotation (oomwatch.kube.summary); Events of agents without it still
give the pod, the node, the reason and the count, and the reason gives the limit's scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oomwatch.incident import iso_epoch_s
from oomwatch.kube.oomincident import FIELD_MANAGER, KIND
from oomwatch.kube.summary import REPORTING_CONTROLLER, SUMMARY_ANNOTATION, parse_summary

FIELD_SELECTOR = f"reportingComponent={REPORTING_CONTROLLER}"
WARNING_REASON = "MemoryLimitApproaching"
# Without a summary, the scope the reason implies (oomwatch.kube.events.event_reason).
# Literal here: the plugin's archive carries no Kubernetes client (tests/fleet checks them equal).
_REASON_SCOPE = {
    "ContainerOOMKill": "container",
    "OOMKillDetected": "container",  # agents before 0.2 (oomwatch.kube.events.REASON_CONTAINER)
    "ChildProcessOOMKilled": "container",
    "GroupOOMKill": "container",
    "PodLimitOOMKill": "pod",
    "NodeOOMKill": "node",
}
NOT_KILLS = frozenset({WARNING_REASON, "OOMKilledWithoutKernelKill"})


@dataclass(frozen=True, slots=True)
class Sighting:
    """One agent Event: `count` kills (or warnings) of one container with one reason."""

    namespace: str
    pod: str | None
    node: str | None
    reason: str
    count: int
    first_s: float
    last_s: float
    workload: str
    container: str | None
    scope: str | None
    findings: tuple[str, ...]
    recommendation: str | None
    predicted: bool | None  # a kill: was a MemoryLimitApproaching warning first
    lead_time_s: float | None
    note: str
    verdict: str | None = None  # the diagnosis's verdict code (agents since 0.2.0)

    @property
    def is_kill(self) -> bool:
        return self.reason not in NOT_KILLS

    @property
    def is_warning(self) -> bool:
        return self.reason == WARNING_REASON


def parse_time(value: object) -> float | None:
    """RFC 3339 (with or without fractions, `Z` or an offset) -> epoch seconds."""
    return iso_epoch_s(value) if isinstance(value, str) else None


def parse_event(obj: Mapping[str, Any]) -> Sighting | None:
    """A core/v1 Event written by an oomwatch agent, or None (someone else's, or no time)."""
    meta = _map(obj.get("metadata"))
    source = obj.get("reportingComponent") or obj.get("reportingController")
    if source != REPORTING_CONTROLLER:
        return None
    involved = _map(obj.get("involvedObject") or obj.get("regarding"))
    series = _map(obj.get("series"))
    first = parse_time(obj.get("eventTime")) or parse_time(obj.get("firstTimestamp"))
    last = (
        parse_time(series.get("lastObservedTime"))
        or parse_time(obj.get("lastTimestamp"))
        or first
        or parse_time(meta.get("creationTimestamp"))
    )
    if last is None:
        return None
    count = series.get("count") or obj.get("count") or 1
    reason = str(obj.get("reason") or "")
    summary = parse_summary(_map(meta.get("annotations")).get(SUMMARY_ANNOTATION)) or {}
    kind = involved.get("kind")
    pod = str(involved.get("name")) if kind == "Pod" and involved.get("name") else None
    instance = str(obj.get("reportingInstance") or "")
    node = _str(summary.get("node")) or (
        instance.removeprefix("oomwatch-") if instance.startswith("oomwatch-") else None
    )
    if kind == "Node":
        node = node or _str(involved.get("name"))
    workload = _str(summary.get("workload")) or (f"Pod/{pod}" if pod else f"Node/{node or '?'}")
    findings = summary.get("findings")
    namespace = str(involved.get("namespace") or meta.get("namespace") or "")
    return Sighting(
        namespace="" if kind == "Node" else namespace,  # a Node's Events sit in `default`
        pod=pod,
        node=node,
        reason=reason,
        count=count if isinstance(count, int) and count > 0 else 1,
        first_s=first or last,
        last_s=last,
        workload=workload,
        container=_str(summary.get("container")) or _container(involved.get("fieldPath")),
        scope=_str(summary.get("scope")) or _REASON_SCOPE.get(reason),
        findings=tuple(str(f) for f in findings) if isinstance(findings, list) else (),
        recommendation=_str(summary.get("recommendation")),
        predicted=summary.get("predicted") if isinstance(summary.get("predicted"), bool) else None,
        lead_time_s=_float(summary.get("lead_time_seconds")),
        note=str(obj.get("message") or obj.get("note") or ""),
        verdict=_str(summary.get("verdict")),
    )


def written_by_agent(obj: Mapping[str, Any]) -> bool:
    """Whether every write of an `OOMIncident` was an agent's: its managedFields name only
    the agents' field manager.  Only the agent's ClusterRole may write these objects, so a
    forged one needs a grant beyond `view`; one it names another writer of does not count."""
    entries = _map(obj.get("metadata")).get("managedFields")
    if not isinstance(entries, list) or not entries:
        return False
    return all(_map(e).get("manager") == FIELD_MANAGER for e in entries)


def parse_oomincident(obj: Mapping[str, Any]) -> Sighting | None:
    """An `OOMIncident` an agent wrote (oomwatch.kube.oomincident): `kills` kills of one
    container, with the stored diagnosis; None for one no agent wrote, or without times."""
    if obj.get("kind") != KIND or not written_by_agent(obj):
        return None
    last, first = parse_time(obj.get("lastSeen")), parse_time(obj.get("firstSeen"))
    if last is None:
        return None
    incident = _map(obj.get("incident"))
    forecast = _map(incident.get("forecast"))
    findings = incident.get("findings")
    kills = obj.get("kills")
    codes = [_map(f).get("code") for f in findings] if isinstance(findings, list) else []
    advice = _map(incident.get("recommendation")).get("message")
    predicted = forecast.get("predicted")
    return Sighting(
        namespace=str(_map(obj.get("metadata")).get("namespace") or ""),
        pod=_str(obj.get("pod")),
        node=_str(obj.get("node")),
        reason=KIND,
        count=kills if isinstance(kills, int) and kills > 0 else 1,
        first_s=first or last,
        last_s=last,
        workload=_str(obj.get("workload")) or "?",
        container=_str(obj.get("container")),
        scope=_str(incident.get("limit_scope")),
        findings=tuple(str(c) for c in codes if isinstance(c, str)),
        recommendation=_str(advice),
        predicted=predicted if isinstance(predicted, bool) else None,
        lead_time_s=_float(forecast.get("lead_time_seconds")),
        note=str(obj.get("verdict") or ""),
        verdict=_str(incident.get("verdict_code")) or _str(obj.get("verdictCode")),
    )


def _container(field_path: object) -> str | None:
    """`spec.containers{app}` -> `app`."""
    if not isinstance(field_path, str) or "{" not in field_path:
        return None
    return field_path.partition("{")[2].rstrip("}") or None


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
