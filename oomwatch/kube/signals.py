"""What the pod status says about memory that the kernel log cannot: evictions and OOMKilled.

Pure functions over two versions of a pod.  Only *transitions* count, so a relist or an
agent restart does not report an old eviction or termination again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oomwatch.incident import Finding, Incident, iso_epoch_s
from oomwatch.kube.enrich import pod_context
from oomwatch.kube.pods import ContainerInfo, PodInfo, Termination
from oomwatch.sanitize import escape_control

OOMKILLED = "OOMKilled"
LIFETIME_SLACK_S = 5.0
UNKNOWN_START_LOOKBACK_S = 300.0


@dataclass(frozen=True, slots=True)
class OomKilledClaim:
    """The API says this container terminated with reason OOMKilled."""

    pod: PodInfo
    container: ContainerInfo
    termination: Termination

    @property
    def key(self) -> tuple[str, str, str, str]:
        t = self.termination
        return (self.pod.uid, self.container.name, t.container_id or "", t.finished_at or "")

    def window_s(self) -> tuple[float, float] | None:
        """Seconds since the epoch in which a kernel kill would explain the claim."""
        finished = parse_time_s(self.termination.finished_at)
        if finished is None:
            return None
        started = parse_time_s(self.termination.started_at)
        since = started if started is not None else finished - UNKNOWN_START_LOOKBACK_S
        return since - LIFETIME_SLACK_S, finished + LIFETIME_SLACK_S


def oomkilled_claims(pod: PodInfo) -> list[OomKilledClaim]:
    """Every OOMKilled termination the pod status shows (current and last state)."""
    claims: dict[tuple[str, str, str, str], OomKilledClaim] = {}
    for container in pod.containers:
        for term in (container.terminated, container.last_terminated):
            if term is not None and term.reason == OOMKILLED:
                claim = OomKilledClaim(pod, container, term)
                claims[claim.key] = claim
    return list(claims.values())


def new_oomkilled_claims(old: PodInfo | None, new: PodInfo) -> list[OomKilledClaim]:
    """OOMKilled terminations in `new` that `old` did not show."""
    seen = {c.key for c in oomkilled_claims(old)} if old is not None else set()
    return [c for c in oomkilled_claims(new) if c.key not in seen]


def is_memory_eviction(pod: PodInfo) -> bool:
    """Kubelet eviction for memory: reason `Evicted`, message "low on resource: memory"."""
    message = (pod.status_message or "").lower()
    return pod.status_reason == "Evicted" and "memory" in message


def newly_evicted(old: PodInfo | None, new: PodInfo) -> bool:
    return is_memory_eviction(new) and (old is None or not is_memory_eviction(old))


def false_oomkilled_incident(claim: OomKilledClaim, window: tuple[float, float]) -> Incident:
    """The incident for an OOMKilled status with no kernel kill in the container's lifetime."""
    term, pod = claim.termination, claim.pod
    since, until = window
    message = (
        f"Kubernetes reports container {claim.container.name} OOMKilled"
        f" (exit code {term.exit_code}, finished {term.finished_at}) but the node saw no"
        " kernel OOM kill in its cgroup while it ran: the runtime's reason is not a kernel"
        " kill (sticky reason from an earlier child kill, or a shutdown labelled OOMKilled)"
    )
    evidence: dict[str, Any] = {
        "container_id": term.container_id,
        "exit_code": term.exit_code,
        "signal": term.signal,
        "started_at": term.started_at,
        "finished_at": term.finished_at,
        "window_since_s": since,
        "window_until_s": until,
        "kernel_kills_in_window": 0,
    }
    context = pod_context(pod, claim.container)
    context.last_termination_reason = term.reason
    context.last_termination_exit_code = term.exit_code
    return Incident(
        kind="false_oomkilled",
        wall_time=term.finished_at,
        pod_uid=pod.cgroup_uid,
        container_id=term.container_id,
        qos_class=pod.qos_class,
        node=pod.node,
        k8s=context,
        findings=[Finding("false_oomkilled", "warning", escape_control(message), evidence)],
    )


def eviction_incident(pod: PodInfo, observed_at: datetime) -> Incident:
    """The incident for a kubelet memory-pressure eviction of `pod`."""
    status = escape_control(pod.status_message or "")
    message = f"Pod evicted by the kubelet for node memory pressure: {status}".strip()
    return Incident(
        kind="eviction",
        wall_time=observed_at.isoformat(),
        pod_uid=pod.cgroup_uid,
        qos_class=pod.qos_class,
        node=pod.node,
        k8s=pod_context(pod, None),
        findings=[
            Finding(
                "memory_pressure_eviction",
                "warning",
                message,
                {"status_reason": pod.status_reason, "status_message": pod.status_message},
            )
        ],
    )


def parse_time_s(value: str | None) -> float | None:
    """API timestamps (`2026-11-22T08:00:00Z`) -> seconds since the epoch."""
    return iso_epoch_s(value)
