"""Reconciliation: the kernel log's kills joined with the cgroup counters' rises and OOM
signals, each counted kill recorded once in the cgroup the evidence names, or said to be
ambiguous (`join.reconcile`).  `state` is what it carries between calls, `kernel_time` the
kernel log's clock it is fed, `attribution` which cgroups a header-less kill's evidence
allows, `placement` the joint decision over the kills still waiting.  Pure: no clock, file
or thread; time comes in as arguments.
"""

from __future__ import annotations

from oomwatch.cgroups.oom_events import OomSignal, Sighting
from oomwatch.reconcile.attribution import Rise, covers
from oomwatch.reconcile.join import is_logged_kernel_kill, missing_incident, reconcile
from oomwatch.reconcile.kernel_time import KernelTime
from oomwatch.reconcile.state import (
    AMBIGUOUS_WAIT_S,
    GRACE_S,
    GROUP_REPEAT_S,
    SETTLE_S,
    UNMATCHED_KEEP_S,
    BareKill,
    CgroupFacts,
    CgroupNews,
    Claim,
    CounterKills,
    Reconciled,
    ReconcileState,
)

__all__ = [
    "AMBIGUOUS_WAIT_S",
    "GRACE_S",
    "GROUP_REPEAT_S",
    "SETTLE_S",
    "UNMATCHED_KEEP_S",
    "BareKill",
    "CgroupFacts",
    "CgroupNews",
    "Claim",
    "CounterKills",
    "KernelTime",
    "OomSignal",
    "ReconcileState",
    "Reconciled",
    "Rise",
    "Sighting",
    "covers",
    "is_logged_kernel_kill",
    "missing_incident",
    "reconcile",
]
