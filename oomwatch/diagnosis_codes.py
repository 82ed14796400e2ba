"""The closed vocabularies of the diagnosis: finding codes, verdict codes, recommendation
actions, and the keys a recommendation carries.

They are static types only (`Literal`, `TypedDict`): at runtime a code is a `str` and a
recommendation a `dict`, so a store or cluster object written by another version (a code
this one does not know) still loads, and the CRD keeps them a string and a free-form map.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

__all__ = [
    "DeviceCauseCode",
    "DiagnosisCode",
    "ElsewhereCode",
    "FindingCode",
    "KubeSignalCode",
    "LimitCode",
    "Recommendation",
    "RecommendationAction",
    "SizingBasis",
    "VerdictCode",
]

# Which limit was hit (diagnosis/limits.py).
LimitCode = Literal[
    "limit-container",
    "limit-pod",
    "limit-qos",
    "limit-node-allocatable",
    "limit-cgroup",
    "limit-node",
    "limit-cpuset",
    "limit-mempolicy",
]
# What filled a device, for a framework OOM (diagnosis/device.py).
DeviceCauseCode = Literal[
    "device-fragmentation",
    "device-shared",
    "device-too-large",
    "device-footprint",
]
# No kernel kill: the finding speaks for the incident (diagnosis/elsewhere.py).
ElsewhereCode = Literal["framework-oom", "eviction", "false-oomkilled"]

# Every code `diagnose()` produces (diagnosis.CODES is this set, at run time).
DiagnosisCode = Literal[
    LimitCode,
    DeviceCauseCode,
    ElsewhereCode,
    "no-memory-limit",
    "besteffort-qos",
    # what filled the limit (consumers.py, trends.py)
    "thp-hidden",
    "tmpfs-shmem",
    "page-cache",
    "kernel-memory",
    "many-processes",
    "overcommit-vm",
    "leak-trend",
    "spike",
    "crash-loop",
    # who was killed and how it was reported (victims.py)
    "score-adj-victim",
    "child-process-kill",
    "group-kill",
    "rate-limited-report",
    "node-panic",
]
# A pod's status, read back from the cluster (kube/signals.py).
KubeSignalCode = Literal["false_oomkilled", "memory_pressure_eviction"]
FindingCode = Literal[DiagnosisCode, KubeSignalCode]

# The finding a verdict leads with (diagnosis/verdict.py `verdict_code`), or neither.
VerdictCode = Literal[
    "node-panic", DeviceCauseCode, ElsewhereCode, LimitCode, "no-kill", "limit-unknown"
]

RecommendationAction = Literal[
    "fix-growth",
    "watch-longer",
    "resize",
    "widen-numa-nodes",
    "find-kernel-memory",
    "relieve-node",
    "reduce-device-memory",
    "fix-fragmentation",
    "free-shared-device",
]


class SizingBasis(TypedDict):
    """What a sized limit or request rests on (diagnosis/sizing.py `workload_sizes`)."""

    usage_at_kill_bytes: int | None
    peak_bytes: int | None
    peak_source: str
    window_seconds: float | None
    samples: int
    based_on: str


class Recommendation(TypedDict, total=False):
    """`Incident.recommendation`: the action, the sentence, and the sizes it names; which
    keys are present depends on the action (diagnosis/recommend.py and its advice modules)."""

    action: RecommendationAction
    message: str
    limit_will_not_help: bool
    # the sampling basis's sentence, or the evidence of the finding the advice follows
    based_on: str | dict[str, Any]
    memory_limit_bytes: int | None
    memory_limit: str | None
    memory_request_bytes: int | None
    memory_request: str | None
    buffer_percent: int
    usage_at_kill_bytes: int | None
    peak_bytes: int | None
    peak_source: str
    window_seconds: float | None
    samples: int
    kernel_bytes: int
    charged_bytes: int
    scope_limit_bytes: int | None
    needed_bytes: int
    fits_node: bool | None
    besteffort_rss_bytes: int
