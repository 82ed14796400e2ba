"""Memory trouble that is not a kernel OOM kill: a framework's device OOM (CUDA/TensorFlow),
a kubelet node-pressure eviction, and an OOMKilled status with no kernel kill behind it.

The allocator dict comes from the trainer probe (`oomwatch.probe.join.framework_incident`:
`allocated_bytes`, `reserved_unallocated_bytes`, `requested_bytes`, ...); its numbers are read
defensively (the probe file is written by the workload, so nothing is trusted to be typed).
"""

from __future__ import annotations

from typing import Any

from oomwatch.diagnosis.evidence import where
from oomwatch.incident import Finding, Incident
from oomwatch.sanitize import escape_control
from oomwatch.units import fmt_bytes

FRAGMENTATION_MIN_SHARE = 0.25  # reserved-but-unallocated as a share of reserved
# Codes the Kubernetes adapter puts on the incidents it builds; diagnosis replaces them.
SUPERSEDED_CODES = frozenset({"false_oomkilled", "memory_pressure_eviction"})


def _num(data: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = data.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def framework_oom(incident: Incident) -> Finding | None:
    if incident.kind != "framework":
        return None
    alloc = incident.allocator or {}
    framework = str(alloc.get("framework") or "framework")
    allocated = _num(alloc, "allocated_bytes")
    idle_bytes = _num(alloc, "reserved_unallocated_bytes")
    requested = _num(alloc, "requested_bytes")
    evidence: dict[str, Any] = {
        "framework": framework,
        "device": alloc.get("device"),
        "allocated_bytes": allocated,
        "requested_bytes": requested,
    }
    message = f"{escape_control(framework)} ran out of device memory"
    message += _rank_words(alloc, evidence) + f" in {where(incident)}"
    if requested is not None:
        message += f" asking for {fmt_bytes(requested)}"
    if allocated is not None and idle_bytes is not None:
        reserved = allocated + idle_bytes
        message += (
            f"; {fmt_bytes(allocated)} allocated by tensors, {fmt_bytes(reserved)} reserved"
            f" by the caching allocator ({fmt_bytes(idle_bytes)} reserved but unallocated)"
        )
        evidence.update(reserved_bytes=reserved, reserved_unallocated_bytes=idle_bytes)
        if reserved and idle_bytes >= FRAGMENTATION_MIN_SHARE * reserved:
            message += ": fragmentation — try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
            evidence["fragmented"] = True
    else:
        message += "; the probe recorded no allocator numbers (allocated/reserved unknown)"
    message += _snapshot_words(alloc.get("snapshot"), requested, evidence)
    return Finding("framework-oom", "critical", message + ".", evidence)


def _rank_words(alloc: dict[str, Any], evidence: dict[str, Any]) -> str:
    """` on cuda:1 as rank 1 of 2`, and how many other ranks ran out after it."""
    rank, world = _num(alloc, "rank"), _num(alloc, "world_size")
    if rank is None or world is None:
        return ""
    evidence.update(rank=rank, world_size=world, job_id=alloc.get("job_id"))
    device = alloc.get("device")
    words = f" on {escape_control(device)}" if isinstance(device, str) else ""
    words += f" as rank {rank} of {world}"
    ranks = alloc.get("ranks")
    others = len(ranks) - 1 if isinstance(ranks, list) else 0
    if others > 0:
        evidence["ranks_out_of_memory"] = others + 1
        words += f" (the first of {others + 1} ranks to run out)"
    return words


def _snapshot_words(snapshot: Any, requested: int | None, evidence: dict[str, Any]) -> str:
    """What the allocator's snapshot adds: the largest free block against the request.  Free
    memory in segments but no block as large as the request is fragmentation, whatever the
    reserved/allocated totals say."""
    if not isinstance(snapshot, dict):
        return ""
    largest = _num(snapshot, "largest_free_block_bytes")
    reserved, active = _num(snapshot, "reserved_bytes"), _num(snapshot, "active_bytes")
    if largest is None or reserved is None or active is None:
        return ""
    free = max(reserved - active, 0)
    evidence.update(
        largest_free_block_bytes=largest,
        free_in_segments_bytes=free,
        fragmentation=snapshot.get("fragmentation"),
    )
    words = (
        f"; the allocator's snapshot: largest free block {fmt_bytes(largest)} of"
        f" {fmt_bytes(free)} free in {snapshot.get('segments')} segments"
    )
    if requested is not None and largest < requested <= free and not evidence.get("fragmented"):
        evidence["fragmented"] = True
        words += (
            f", no block of {fmt_bytes(requested)}: fragmentation — try"
            " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )
    return words


def eviction(incident: Incident) -> Finding | None:
    if incident.kind != "eviction":
        return None
    ctx = incident.k8s
    qos = incident.qos_class or (ctx.qos_class if ctx else None)
    prior = _prior_evidence(incident, "memory_pressure_eviction")
    evidence = {"qos_class": qos, **prior}
    message = (
        f"The kubelet evicted {where(incident)} because the node was low on memory (not a"
        f" kernel OOM kill); QoS class {escape_control(qos or 'unknown')}. Eviction order:"
        " BestEffort first, then Burstable pods using more than their requests (largest"
        " excess first), Guaranteed last; set memory requests close to real usage."
    )
    return Finding("eviction", "warning", message, evidence)


def false_oomkilled(incident: Incident) -> Finding | None:
    if incident.kind != "false_oomkilled":
        return None
    prior = _prior_evidence(incident, "false_oomkilled")
    ctx = incident.k8s
    evidence = {
        "last_termination_reason": ctx.last_termination_reason if ctx else None,
        "last_termination_exit_code": ctx.last_termination_exit_code if ctx else None,
        **prior,
    }
    message = (
        f"Kubernetes shows {where(incident)} as OOMKilled, but the node's kernel log and"
        " cgroup counters show no OOM kill while it ran: the reason is the runtime's label"
        " (e.g. a sticky reason from an earlier child-process kill), not a memory limit."
    )
    return Finding("false-oomkilled", "warning", message, evidence)


def _prior_evidence(incident: Incident, code: str) -> dict[str, Any]:
    for finding in incident.findings:
        if finding.code == code:
            return dict(finding.evidence)
    return {}
