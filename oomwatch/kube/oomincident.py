"""`OOMIncident` (oomwatch.io/v1alpha1): one problem of one container, as a namespaced object
anyone who may view the namespace reads with `kubectl get/describe oomincidents` (pure).

One object per fingerprint (namespace, workload, container, verdict code, node): a crash loop
is one object whose `kills` grows, not one per kill.  The object carries the stored incident's
one diagnosis as stored (verdict, findings, recommendation: nothing is diagnosed again) and
its kernel evidence, trimmed to `MAX_OBJECT_BYTES` (the node's store keeps the full record):
no task table, timeline or decoder notes, top victims only, the probe's allocator summary
only where its identity was vouched for.  The plugin rebuilds an `Incident` from `incident`
and prints it with `oomwatch report`'s own renderer; `analysis` holds that renderer's block
for the incident as text, so `kubectl describe` (which prints a custom resource's fields in
key order, a multi-line string as its lines) reads like the report.

This module imports no Kubernetes client: the plugin's zipapp imports it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from oomwatch.diagnosis_codes import Recommendation
from oomwatch.incident import Incident
from oomwatch.sanitize import escape_control
from oomwatch.units import quantity

GROUP = "oomwatch.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "OOMIncident"
PLURAL = "oomincidents"
SINGULAR = "oomincident"
SHORT_NAMES = ("oomi",)
# Every write carries this field manager: `kubectl oomwatch top` counts only objects an agent
# wrote (their managedFields name it), and only the agent's ClusterRole may write them.
FIELD_MANAGER = "oomwatch-agent"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
NODE_LABEL = "oomwatch.io/node"  # the writing agent's node (its GC lists by it)
MAX_OBJECT_BYTES = 16 * 1024
MAX_VICTIMS = 5
MAX_FINDINGS = 12
MAX_TEXT_CHARS = 1024  # one string of the trimmed incident (a message, a cgroup path)
# The text report in the object, as JSON-encoded bytes: the rest of the 16 KiB keeps the
# structured incident the plugin reads.
MAX_ANALYSIS_BYTES = 6 * 1024
ANALYSIS_CUT = "[… cut to fit the object: `oomwatch report` on the node prints it whole]"
_ESCAPE_CHARS = 10  # the longest escape `escape_control` writes: \UNNNNNNNN
UNVERIFIED = "unverified"  # oomwatch.probe.identity.UNVERIFIED (no import: keeps this light)
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_NAME_PART = re.compile(r"[^a-z0-9-]+")
_WHOLE_ESCAPE = re.compile(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What makes two kills the same problem: one object each."""

    namespace: str
    workload: str  # `Deployment/web`, `Pod/x` for a pod nothing owns
    container: str
    verdict_code: str
    node: str

    def object_name(self) -> str:
        """A DNS-1123 name: readable prefix (workload, container) plus a hash of the whole."""
        digest = hashlib.sha256("\x1f".join(self.fields()).encode()).hexdigest()[:12]
        stem = f"{self.workload.partition('/')[2]}-{self.container}".lower()
        stem = _NAME_PART.sub("-", stem).strip("-")[:200] or "oom"
        return f"{stem}-{digest}"

    def fields(self) -> tuple[str, str, str, str, str]:
        return (self.namespace, self.workload, self.container, self.verdict_code, self.node)


def node_label_value(node: str) -> str:
    """The node as a label value: itself where a label can hold it, else a hash."""
    if _LABEL_VALUE.match(node):
        return node
    return "h-" + hashlib.sha256(node.encode()).hexdigest()[:32]


def limit_text(limit_bytes: int | None) -> str:
    """The limit in the printer column as the API writes it (`512Mi`, `1536Mi`), or `none`."""
    return "none" if limit_bytes is None else quantity(limit_bytes)


def build_object(
    incident: Incident,
    fingerprint: Fingerprint,
    *,
    pod: str,
    kills: int,
    first_seen: str,
    last_seen: str,
) -> dict[str, Any]:
    """The whole object for the stored, diagnosed `incident` (the latest of `kills`)."""
    trimmed = trimmed_incident(incident)
    memcg = incident.memcg
    limit = memcg.limit_bytes if memcg else None
    k8s = incident.k8s
    if limit is None and k8s is not None:
        limit = k8s.container_memory_limit_bytes
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": fingerprint.object_name(),
            "namespace": fingerprint.namespace,
            "labels": {
                MANAGED_BY_LABEL: FIELD_MANAGER,
                NODE_LABEL: node_label_value(fingerprint.node),
            },
        },
        # First in `kubectl describe`'s key order (`apiVersion` sorts after it).
        "analysis": analysis_text(incident),
        "workload": fingerprint.workload,
        "container": fingerprint.container,
        "node": fingerprint.node,
        "pod": pod,
        "verdictCode": fingerprint.verdict_code,
        "verdict": _clip(incident.verdict or f"{incident.kind} OOM incident (not diagnosed)."),
        "kills": kills,
        "firstSeen": first_seen,
        "lastSeen": last_seen,
        "limit": limit_text(limit),
        "incident": trimmed,
    }
    return fit(obj)


def analysis_text(incident: Incident) -> str:
    """`oomwatch report`'s text for `incident`, escaped line by line (kubectl prints it raw;
    its newlines stay line breaks), cut at a line end to MAX_ANALYSIS_BYTES with a marker."""
    from oomwatch.report.text import render_incident  # the one rendering of the report

    lines = [escape_control(line) for line in render_incident(incident, 1, 1).split("\n")]
    budget = MAX_ANALYSIS_BYTES - _json_bytes(ANALYSIS_CUT) - 2
    if _json_bytes("\n".join(lines)) <= MAX_ANALYSIS_BYTES:
        return "\n".join(lines)
    kept: list[str] = []
    used = 0
    for line in lines:
        cost = _json_bytes(line)  # the quotes pay for the newline's `\n`
        if used + cost > budget:  # the line that overflows: what fits of it, then the marker
            if piece := _cut_line(line, budget - used).rstrip():
                kept.append(piece)
            break
        kept.append(line)
        used += cost
    return "\n".join([*kept, ANALYSIS_CUT])


def _json_bytes(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode())


def _cut_line(line: str, budget_bytes: int) -> str:
    while line and _json_bytes(line) > budget_bytes:
        line = line[: len(line) * max(budget_bytes, 0) // _json_bytes(line)]
    tail = line.rfind("\\", max(0, len(line) - _ESCAPE_CHARS))
    if tail >= 0 and not _WHOLE_ESCAPE.match(line, tail):
        line = line[:tail]  # an escape cut short would read as other characters
    return line


def trimmed_incident(incident: Incident) -> dict[str, Any]:
    """The incident's JSON form with what the node store alone keeps left out, nulls dropped
    (the object's schema has defaults for none of them: absent reads as unknown)."""
    allocator = incident.allocator
    if allocator is not None:
        vouched = allocator.get("identity") not in (None, UNVERIFIED)
        allocator = (
            {k: v for k, v in allocator.items() if k not in ("device_samples", "snapshot")}
            if vouched
            else None
        )
    slim = replace(
        incident,
        tasks=[],
        notes=[],
        timeline=None,
        memcg_stats=None,
        victims=incident.victims[:MAX_VICTIMS],
        victims_omitted=incident.victim_count - len(incident.victims[:MAX_VICTIMS]),
        findings=incident.findings[:MAX_FINDINGS],
        allocator=allocator,
    )
    data: dict[str, Any] = _without_nulls(slim.to_dict())
    summary = _timeline_summary(incident)
    if summary:  # the timeline's figures read in the report; its samples stay on the node
        data["timeline"] = summary
    return data


def _timeline_summary(incident: Incident) -> dict[str, Any]:
    timeline = incident.timeline
    if timeline is None:
        return {}
    values = {
        "interval_seconds": timeline.interval_seconds,
        "peak_bytes": timeline.peak_bytes,
        "usage_at_kill_bytes": timeline.usage_at_kill_bytes,
        "growth_bytes_per_second": timeline.growth_bytes_per_second,
    }
    return {k: v for k, v in values.items() if v is not None}


def object_bytes(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


IncidentKey = Literal[
    "attribution",
    "allocator",
    "victims",
    "findings",
    "invoker",
    "group_cgroup",
    "oom_memcg",
    "task_memcg",
]
"""Fields of `Incident` a shrink step drops or cuts (tests check they are its fields)."""
Shrink = Callable[[dict[str, Any]], None]


def _without(key: IncidentKey) -> Shrink:
    return lambda incident: incident.pop(key, None)


def _first(key: IncidentKey, count: int) -> Shrink:
    def cut(incident: dict[str, Any]) -> None:
        if key in incident:
            incident[key] = incident[key][:count]

    return cut


def _findings_without_evidence(incident: dict[str, Any]) -> None:
    for finding in incident.get("findings", ()):
        finding.pop("evidence", None)  # `Finding.evidence`


def _recommendation_without_basis(incident: dict[str, Any]) -> None:
    recommendation: Recommendation | None = incident.get("recommendation")
    if recommendation is not None:
        recommendation.pop("based_on", None)  # a key `Recommendation` has: mypy checks it


# The least needed parts of the incident first.
SHRINK_STEPS: tuple[Shrink, ...] = (
    _without("attribution"),
    _without("allocator"),
    _first("victims", 1),
    _findings_without_evidence,
    _first("findings", 3),
    _recommendation_without_basis,
    _without("invoker"),
    _without("group_cgroup"),
    _without("oom_memcg"),
    _without("task_memcg"),
)


def fit(obj: dict[str, Any]) -> dict[str, Any]:
    """The object within MAX_OBJECT_BYTES: long strings clipped, then the least needed parts
    of the incident dropped, in order (`SHRINK_STEPS`), until it fits."""
    incident = obj["incident"]
    _clip_strings(incident)
    for shrink in SHRINK_STEPS:
        if object_bytes(obj) <= MAX_OBJECT_BYTES:
            return obj
        shrink(incident)
    while object_bytes(obj) > MAX_OBJECT_BYTES:  # only a pathological recommendation is left
        for key in ("recommendation", "k8s", "forecast", "attribution"):
            if key in incident:
                del incident[key]
                break
        else:
            obj["incident"] = {"kind": incident.get("kind", "unknown")}
            break
    return obj


def _clip_strings(value: Any) -> Any:
    """Escape and clip every string in place: `kubectl describe` prints the object's strings
    as they are, so a process name a pod chose must not reach a terminal raw."""
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = _clip_strings(item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            value[index] = _clip_strings(item)
    elif isinstance(value, str):
        return _clip(value)
    return value


def _clip(text: str) -> str:
    text = escape_control(text)
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"


_FREE_FORM = frozenset({"recommendation", "evidence", "allocator"})  # kept as stored


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: v if k in _FREE_FORM else _without_nulls(v)
            for k, v in value.items()
            if v is not None
        }
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def read_incident(obj: dict[str, Any]) -> Incident | None:
    """The `Incident` an object carries (for the report renderer), or None if it has none."""
    data = obj.get("incident")
    if not isinstance(data, dict):
        return None
    try:
        return Incident.from_dict(data)
    except (TypeError, ValueError, AttributeError):
        return None


def safe_text(value: object) -> str:
    """A string read back from the cluster, safe to print."""
    return escape_control(str(value)) if value is not None else ""
