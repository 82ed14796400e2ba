"""`kubectl oomwatch top`: what died of memory, where and why, one row per workload, container
and limit scope, or verdict where no limit was hit (a framework's device OOM: fragmentation,
a shared GPU, ...), ranked by how actionable the row's diagnosis is, then by kills
(oomwatch.diagnosis.ranking; pure: Events and Prometheus series in, rows and text out).

Kill counts come from Prometheus when it is given (the whole window, every node), else from
the Events' series counts (only what the API server still holds: `--event-ttl`, 1 h by
default).  The why comes from the Events' summaries: finding codes counted over kills, the
latest recommendation, the pre-OOM warnings and how early they came.  A pod Prometheus knows
but no Event names is put under the workload its name suggests, marked as inferred.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from oomwatch.diagnosis.ranking import action_rank
from oomwatch.fleet.events import Sighting
from oomwatch.fleet.prom import KillSeries
from oomwatch.sanitize import escape_control

SPARKS = "▁▂▃▄▅▆▇█"
RECOMMENDATION_COLUMN_CHARS = 90
# Deployment pods: <deployment>-<pod-template-hash>-<5 chars>; StatefulSet pods: <name>-<n>.
_DEPLOYMENT_POD = re.compile(r"^(?P<name>.+)-[bcdfghjklmnpqrstvwxz2456789]{6,10}-[a-z0-9]{5}$")
_STATEFUL_POD = re.compile(r"^(?P<name>.+)-\d+$")

Key = tuple[str, str, str, str]  # namespace, workload, container, scope (or verdict)


@dataclass(slots=True)
class Row:
    namespace: str
    workload: str
    container: str
    scope: str
    buckets: list[int]
    kills: int = 0
    warnings: int = 0
    nodes: set[str] = field(default_factory=set)
    pods: set[str] = field(default_factory=set)
    findings: Counter[str] = field(default_factory=Counter)
    recommendation: str | None = None
    recommendation_at_s: float = 0.0
    recommendation_rank: int = 1 << 30  # action_rank of the verdict it came with
    verdicts: Counter[str] = field(default_factory=Counter)
    lead_times_s: list[float] = field(default_factory=list)
    inferred: bool = False  # workload from pod names only

    def diagnosed(self, seen: Sighting) -> None:
        """Count a kill Event's diagnosis; keep the advice of the most actionable verdict
        (among equals, the latest)."""
        self.findings.update({code: seen.count for code in seen.findings})
        if seen.verdict:
            self.verdicts[seen.verdict] += seen.count
        rank = action_rank(seen.verdict)
        if seen.recommendation and (rank, -seen.last_s) <= (
            self.recommendation_rank,
            -self.recommendation_at_s,
        ):
            self.recommendation, self.recommendation_at_s = seen.recommendation, seen.last_s
            self.recommendation_rank = rank
        if seen.predicted and seen.lead_time_s is not None:
            self.lead_times_s.append(seen.lead_time_s)

    def trend(self) -> str:
        return trend_word(self.buckets)

    @property
    def verdict(self) -> str | None:
        """The most actionable verdict code of its Events (None: no agent summary said)."""
        return min(self.verdicts, key=action_rank) if self.verdicts else None

    def ranked_findings(self) -> list[tuple[str, int]]:
        """Finding codes, the most actionable first, then the most frequent."""
        return sorted(self.findings.items(), key=lambda item: (action_rank(item[0]), -item[1]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "workload": self.workload,
            "workload_inferred": self.inferred,
            "container": self.container,
            "scope": self.scope,
            "verdict": self.verdict,
            "kills": self.kills,
            "kills_per_bucket": self.buckets,
            "trend": self.trend(),
            "nodes": sorted(self.nodes),
            "pods": sorted(self.pods),
            "findings": dict(self.ranked_findings()),
            "recommendation": self.recommendation,
            "warnings": self.warnings,
            "lead_times_seconds": self.lead_times_s,
        }


def guess_workload(pod: str) -> str:
    """The workload a pod's name suggests (`web-7d4b9c8f6d-x2x9z` -> `Deployment/web`)."""
    for pattern, kind in ((_DEPLOYMENT_POD, "Deployment"), (_STATEFUL_POD, "StatefulSet")):
        match = pattern.match(pod)
        if match:
            return f"{kind}/{match['name']}"
    return f"Pod/{pod}"


def bucket_of(at_s: float, ends: Sequence[float], step: int) -> int | None:
    for i, end in enumerate(ends):
        if end - step < at_s <= end:
            return i
    return None


def build(
    sightings: Sequence[Sighting],
    series: Sequence[KillSeries] | None,
    ends: Sequence[float],
    step: int,
) -> list[Row]:
    """Rows over the window the bucket ends span; `series` None: Events only."""
    since_s = ends[0] - step
    rows: dict[Key, Row] = {}
    known = {(s.namespace, s.pod): s.workload for s in sightings if s.pod}

    def row(key: Key) -> Row:
        if key not in rows:
            rows[key] = Row(*key, buckets=[0] * len(ends))
        return rows[key]

    for kills in series or ():
        labels = kills.labels
        ns, pod, node = labels["namespace"], labels["pod"], labels["node"] or labels["instance"]
        workload = known.get((ns, pod)) or (guess_workload(pod) if pod else f"Node/{node}")
        entry = row((ns, workload, labels["container"], labels["scope"] or "?"))
        entry.inferred = entry.inferred or (bool(pod) and (ns, pod) not in known)
        entry.buckets = [a + b for a, b in zip(entry.buckets, kills.buckets, strict=True)]
        entry.kills += sum(kills.buckets)
        entry.nodes.add(node)
        if pod:
            entry.pods.add(pod)
    for seen in sightings:
        if seen.last_s <= since_s:
            continue
        # No limit scope (a framework's device OOM): its verdict tells rows apart instead.
        scope = seen.scope or (seen.verdict if seen.is_kill else None) or "?"
        entry = row((seen.namespace, seen.workload, seen.container or "", scope))
        if seen.node:
            entry.nodes.add(seen.node)
        if seen.pod:
            entry.pods.add(seen.pod)
        if seen.is_warning:
            entry.warnings += seen.count
            continue
        if not seen.is_kill:
            continue
        if series is None:
            entry.kills += seen.count
            at = bucket_of(seen.last_s, ends, step)
            if at is not None:
                entry.buckets[at] += seen.count
        entry.diagnosed(seen)
    return sorted(
        rows.values(),
        key=lambda r: (action_rank(r.verdict), -r.kills, -r.warnings, r.namespace, r.workload),
    )


def sparkline(buckets: Sequence[int]) -> str:
    top = max(buckets, default=0)
    if top == 0:
        return " " * len(buckets)
    return "".join(" " if b == 0 else SPARKS[min(7, (b * 8 - 1) // top)] for b in buckets)


def trend_word(buckets: Sequence[int]) -> str:
    total = sum(buckets)
    if total == 0:
        return "-"
    if total == 1:
        return "once"
    if sum(buckets[:-1]) == 0:
        return "new"
    half = len(buckets) // 2
    early, late = sum(buckets[:half]), sum(buckets[half:])
    if late >= 1.5 * max(early, 1):
        return "rising"
    if early >= 1.5 * max(late, 1):
        return "falling"
    return "steady"


def render(rows: Sequence[Row], header: str, notes: Sequence[str], wide: bool = False) -> str:
    """The table a person reads: kills, where, why, and what to change."""
    lines = [header, *notes]
    if not rows:
        lines.append("No OOM kills or warnings in that window.")
        return "\n".join(lines) + "\n"
    table = [
        (
            "NAMESPACE",
            "WORKLOAD",
            "CONTAINER",
            "SCOPE",
            "KILLS",
            "NODES",
            "TREND",
            "",
            "WARNED",
            "FINDINGS",
            "TOP RECOMMENDATION",
        )
    ]
    for r in rows:
        lead = f" ~{statistics.median(r.lead_times_s) / 60:.0f}m ahead" if r.lead_times_s else ""
        rec = r.recommendation or "-"
        if not wide and len(rec) > RECOMMENDATION_COLUMN_CHARS:
            rec = rec[: RECOMMENDATION_COLUMN_CHARS - 3] + "..."
        table.append(
            (
                r.namespace or "-",
                ("~" if r.inferred else "") + r.workload,
                r.container or "-",
                r.scope,
                str(r.kills),
                str(len(r.nodes)),
                sparkline(r.buckets),
                r.trend(),
                f"{r.warnings}{lead}" if r.warnings or lead else "-",
                " ".join(f"{c}x{n}" for c, n in r.ranked_findings()[:4]) or "-",
                rec,
            )
        )
    # Every cell came from the API or Prometheus: no escape sequence or newline gets through.
    safe = [tuple(escape_control(cell) for cell in cells) for cells in table]
    widths = [max(len(cells[i]) for cells in safe) for i in range(len(safe[0]) - 1)]
    for cells in safe:
        padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=False)]
        lines.append("  ".join([*padded, cells[-1]]).rstrip())
    if any(r.inferred for r in rows):
        lines.append("~ workload inferred from pod names (no Event left to name its owner)")
    return "\n".join(lines) + "\n"
