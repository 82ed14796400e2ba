"""What kind of OOM an incident is: the kernel's kills and the others oomwatch records.

Whether a kind is a kill by the kernel's OOM killer decides what evidence an incident can
have (a report, counters, a victim); the diagnosis and the outputs ask here.
"""

from __future__ import annotations

from typing import Literal, get_args

# Kills the kernel's OOM killer made (a `Killed process` line or an oom_kill count); `unknown`
# is a kill whose report did not say which constraint.  The other kinds are not kernel kills:
# a framework's own OOM, a kubelet eviction, a pod Kubernetes calls OOMKilled with no kill.
KernelKillKind = Literal["memcg", "global", "cpuset", "mempolicy", "unknown"]
IncidentKind = Literal[KernelKillKind, "framework", "eviction", "false_oomkilled"]

INCIDENT_KINDS: tuple[str, ...] = get_args(IncidentKind)
KERNEL_KILL_KINDS: tuple[str, ...] = get_args(KernelKillKind)
# Kernel kills under a cpuset or NUMA memory policy constraint (CONSTRAINT_CPUSET,
# CONSTRAINT_MEMORY_POLICY in mm/oom_kill.c): the allowed nodes were full, not a limit.
CONSTRAINED_KILL_KINDS: tuple[str, ...] = ("cpuset", "mempolicy")


def is_kernel_kill(kind: str) -> bool:
    """Whether an incident of this kind is a kill by the kernel's OOM killer."""
    return kind in KERNEL_KILL_KINDS


def is_constrained_kill(kind: str) -> bool:
    """Whether a kernel kill was bound by a cpuset or memory policy, not by memory as such."""
    return kind in CONSTRAINED_KILL_KINDS
