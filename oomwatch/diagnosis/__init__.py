"""Diagnosis: findings with evidence and a recommendation, as pure functions of an incident.

`diagnose(incident, history=...)` is the entry point for the daemon (before it stores an
incident) and the report; it fills `findings`, `recommendation`, `verdict` and
`verdict_code`, which every output speaks from.  It is idempotent (re-diagnosing replaces its
own findings) and keeps findings other stages added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import get_args

from oomwatch.dataclass_dict import replaced
from oomwatch.diagnosis import consumers, device, elsewhere, limits, trends, victims
from oomwatch.diagnosis.recommend import recommend
from oomwatch.diagnosis.verdict import unknowns, verdict, verdict_code
from oomwatch.diagnosis_codes import DiagnosisCode
from oomwatch.incident import Finding, Incident

__all__ = ["CODES", "diagnose", "unknowns", "verdict"]

_CHECKS: tuple[Callable[[Incident], Finding | None], ...] = (
    limits.limit_finding,
    consumers.thp_hidden,
    consumers.tmpfs_shmem,
    consumers.page_cache,
    consumers.kernel_memory,
    consumers.many_processes,
    consumers.overcommit_vm,
    victims.score_adj_victim,
    victims.child_process_kill,
    victims.group_kill,
    victims.rate_limited_report,
    victims.node_panic,
    trends.leak_trend,
    trends.spike,
    elsewhere.framework_oom,
    device.device_cause,
    elsewhere.eviction,
    elsewhere.false_oomkilled,
    limits.no_memory_limit,
    limits.besteffort_qos,
)
CODES: frozenset[str] = frozenset(get_args(DiagnosisCode))  # nested Literals are flattened
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def diagnose(incident: Incident, history: Sequence[Incident] = ()) -> Incident:
    """The incident with `findings` (most severe first), `recommendation`, `verdict` and
    `verdict_code` filled.

    `history`: earlier incidents from the same node (any order, may include this one); only
    those of the same container within the crash-loop window count.
    """
    found = [f for check in _CHECKS if (f := check(incident)) is not None]
    loop = trends.crash_loop(incident, history)
    if loop is not None:
        found.append(loop)
    found.sort(key=lambda f: _SEVERITY_ORDER.get(f.severity, 3))
    kept = [
        f
        for f in incident.findings
        if f.code not in CODES and f.code not in elsewhere.SUPERSEDED_CODES
    ]
    out = replaced(incident, findings=found + kept, recommendation=recommend(incident, found))
    out.verdict, out.verdict_code = verdict(out), verdict_code(out)
    return out
