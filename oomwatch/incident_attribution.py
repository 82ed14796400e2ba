"""How sure oomwatch is of a kill's cgroup, and why: the `attribution` part of an `Incident`
(re-exported by `incident.py`; `reconcile/attribution.py` decides it from the evidence)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# How the victim's cgroup was established (see `Attribution`).
AttributionMethod = Literal["report", "group", "oom_signal", "pid_seen", "counter", "none"]
AttributionConfidence = Literal["certain", "ambiguous", "unknown"]


@dataclass(slots=True)
class AttributionCandidate:
    """A cgroup the evidence leaves possible for a kill, with the identity its path gives
    (and the pod's name once Kubernetes enrichment knows the UID)."""

    cgroup: str
    pod_uid: str | None = None
    container_id: str | None = None
    namespace: str | None = None
    pod: str | None = None

    def name(self) -> str:
        if self.pod:
            return f"{self.namespace}/{self.pod}" if self.namespace else self.pod
        return f"uid {self.pod_uid}" if self.pod_uid else self.cgroup


@dataclass(slots=True)
class Attribution:
    """How sure oomwatch is of the victim's cgroup, and why.

    `certain`: one cgroup fits all the kernel's evidence (its report names it, or for a
    report whose header the kernel rate-limited: the only counter that rose at that time,
    the pid seen in that cgroup, the only one whose OOM notification came before the kill).
    `ambiguous`: two or more fit and nothing the kernel gives separates them; `candidates`
    names them and no pod is charged.  `unknown`: none fits (an unwatched cgroup).
    """

    method: AttributionMethod
    confidence: AttributionConfidence
    candidates: list[AttributionCandidate] = field(default_factory=list)
    reason: str | None = None  # in words: what decided it, or what could not be separated

    @property
    def ambiguous(self) -> bool:
        return self.confidence == "ambiguous"

    def describe(self) -> str:
        """`one of pods ns/a, ns/b` (names where Kubernetes knew them, else pod UIDs, else
        cgroup paths): how every output names the pods of an ambiguous kill."""
        names = [c.name() for c in self.candidates]
        noun = "pods" if all(c.pod_uid for c in self.candidates) else "cgroups"
        return f"one of {noun} " + ", ".join(names)
