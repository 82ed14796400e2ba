"""How actionable a verdict code is: the one order every summary ranks by (the report's
table, `kubectl oomwatch top`), so the diagnosis a reader can act on comes before the count.

A setting fixes it, then a limit or placement, then a smaller request, then the kinds whose
fix lies elsewhere, then the verdicts the evidence could not decide.
"""

from __future__ import annotations

ACTION_ORDER = (
    "device-fragmentation", "device-shared",
    "limit-container", "limit-pod", "limit-node-allocatable", "limit-qos", "limit-node",
    "limit-cgroup", "limit-cpuset", "limit-mempolicy",
    "device-too-large", "device-footprint",
    "framework-oom", "eviction", "false-oomkilled", "no-kill", "limit-unknown",
)  # fmt: skip
_RANK = {code: n for n, code in enumerate(ACTION_ORDER)}


def action_rank(code: str | None) -> int:
    """The code's place in ACTION_ORDER (smaller: more actionable); unknown codes last."""
    return _RANK.get(code or "", len(ACTION_ORDER))
