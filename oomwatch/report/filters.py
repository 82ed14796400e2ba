"""`--since`, `--pod` and `--last` for inputs other than the store (which filters in SQL),
and what to say when `--pod` matches nothing: a bare kernel log names pods only by UID."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

from oomwatch.diagnosis.trends import incident_time_s
from oomwatch.incident import Incident, PodContext, Victim, parse_iso

_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)", re.IGNORECASE)
UID_PREFIX_CHARS = 8  # the summary table shows pod UIDs by their first 8 characters
MAX_PODS_LISTED = 20
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`2h`, `30m`, `90s`, `1d`, `1w` ago, or an ISO-8601 time (UTC when no zone is given)."""
    now = now or datetime.now(UTC)
    m = _RELATIVE.fullmatch(text.strip())
    if m:
        return now - timedelta(seconds=float(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()])
    parsed = parse_iso(text)
    if parsed is None:
        raise ValueError(
            f"--since {text!r}: expected a relative time like 2h, 30m, 1d or an ISO-8601 time"
        )
    return parsed


def pod_matches(incident: Incident, pod: str) -> bool:
    """A pod name, `namespace/name`, or the pod UID (the only one a bare kernel log carries):
    whole, with `_` for `-` as systemd cgroup names write it, or its first 8+ characters.
    An ambiguous kill matches each pod it may have been in (it says it is ambiguous)."""
    wanted = pod.strip().lower().replace("_", "-")
    namespace, _, name = pod.rpartition("/")
    ctx = incident.k8s
    known = [(incident.pod_uid, ctx.namespace if ctx else None, ctx.pod if ctx else None)]
    if incident.attribution is not None and incident.attribution.ambiguous:
        known += [(c.pod_uid, c.namespace, c.pod) for c in incident.attribution.candidates]
    for uid, ns, pod_name in known:
        if uid and (uid == wanted or (len(wanted) >= UID_PREFIX_CHARS and uid.startswith(wanted))):
            return True
        if pod_name and pod_name == name and (not namespace or ns == namespace):
            return True
    return False


def selected(
    incidents: Iterable[Incident],
    since: datetime | None,
    pod: str | None,
    warn: Callable[[str], object],
) -> Iterator[Incident]:
    """The incidents that pass `--since` and `--pod`, one at a time, in input order; once
    all are read, `warn` is told how many could not be judged (an incident with no
    wall-clock time cannot pass `--since`)."""
    cutoff = since.timestamp() if since is not None else None
    undated = 0
    for incident in incidents:
        if cutoff is not None:
            if incident.wall_time is None:
                undated += 1
                continue
            if (incident_time_s(incident) or 0) < cutoff:
                continue
        if pod is None or pod_matches(incident, pod):
            yield incident
    if undated:
        warn(
            f"--since: {undated} incidents have no wall-clock time in this log"
            " (only seconds since boot) and were left out"
        )


def apply(
    incidents: Sequence[Incident], since: datetime | None, pod: str | None, last: int | None
) -> tuple[list[Incident], list[str]]:
    """`selected` and `--last` over a list: the incidents and the warnings."""
    warnings: list[str] = []
    out = list(selected(incidents, since, pod, warnings.append))
    if last is not None:
        out = out[-last:] if last > 0 else []
    return out, warnings


def _pods(incidents: Sequence[Incident]) -> dict[str, list[Incident]]:
    """Incidents by pod: `namespace/name` where known, else `uid <UID>`."""
    pods: dict[str, list[Incident]] = {}
    for incident in incidents:
        ctx = incident.k8s
        if ctx is not None and ctx.pod:
            key = f"{ctx.namespace}/{ctx.pod}" if ctx.namespace else ctx.pod
        elif incident.pod_uid:
            key = f"uid {incident.pod_uid}"
        else:
            continue
        pods.setdefault(key, []).append(incident)
    return pods


def pod_facts(incident: Incident) -> Incident:
    """What `pod_matches` and `no_pod_notice` read of an incident, nothing more: the report
    keeps a thousand of these, so a few hundred bytes each whatever the kill's size."""
    ctx, victim = incident.k8s, incident.victim
    return Incident(
        pod_uid=incident.pod_uid,
        container_id=incident.container_id,
        k8s=PodContext(namespace=ctx.namespace, pod=ctx.pod) if ctx is not None else None,
        victims=[Victim(pid=victim.pid, comm=victim.comm)] if victim is not None else [],
        attribution=incident.attribution,
    )


def no_pod_notice(incidents: Sequence[Incident], pod: str) -> list[str]:
    """Lines for a `--pod` that matched none of `incidents`: the pods the input does have,
    by name or, for a bare kernel log, by the only names it carries (UID, container id)."""
    pods = _pods(incidents)
    if not pods:
        return [
            f"No OOM kill in this input matches --pod {pod}: no kill in it"
            f" ({len(incidents)} incident{'s' if len(incidents) > 1 else ''}) is in a"
            " Kubernetes pod's cgroup."
        ]
    named = any(not key.startswith("uid ") for key in pods)
    head = f"No OOM kill in this input matches --pod {pod}"
    if named:
        lines = [f"{head}; the pods it has:"]
    else:
        lines = [
            f"{head}: this log names pods only by UID (and container id), never by name;"
            " the pods it has:"
        ]
    for key, group in list(pods.items())[:MAX_PODS_LISTED]:
        containers = sorted({i.container_id[:12] for i in group if i.container_id})
        victims = sorted({i.victim.comm for i in group if i.victim is not None})
        text = f"  pod {key}: {len(group)} kill{'s' if len(group) > 1 else ''}"
        text += f", container {', '.join(containers)}" if containers else ""
        text += f" ({', '.join(victims[:3])}{', …' if len(victims) > 3 else ''})" if victims else ""
        lines.append(text)
    if len(pods) > MAX_PODS_LISTED:
        lines.append(f"  … {len(pods) - MAX_PODS_LISTED} more pods")
    if not named:
        lines.append(
            f"Give --pod a UID (its first {UID_PREFIX_CHARS} characters are enough). While the"
            " pod exists, `kubectl get pods -A -o custom-columns=UID:.metadata.uid,"
            "NAMESPACE:.metadata.namespace,NAME:.metadata.name` maps UIDs to names."
        )
    return lines
