"""Why a framework ran out of device memory: the cause a reader acts on, as one finding.

The `framework-oom` finding states the facts (oomwatch.diagnosis.elsewhere); this module
names the cause, in the order that decides it:

- `device-too-large`: the request alone is larger than the whole device; nothing but a
  smaller request helps.
- `device-fragmentation`: enough is reserved by the caching allocator but unallocated, or
  the snapshot shows no free block as large as the request; `expandable_segments` fixes it.
- `device-shared`: other processes hold much of the device (capacity − free − this
  process): another pod under time-slicing or MPS, a zombie worker.  torch names those NVML
  shows it ("Process 439 has 40.51 GiB memory in use"); another container's are not shown,
  but the arithmetic still counts them.  Lowering this job's batch size is not the fix.
- `device-footprint`: this job's own memory fills the device: a smaller batch or model
  footprint is.

The numbers come from the probe's file (written by the workload), read defensively.
"""

from __future__ import annotations

from typing import Any

from oomwatch.diagnosis.elsewhere import framework_oom
from oomwatch.diagnosis_codes import DeviceCauseCode
from oomwatch.incident import Finding, Incident
from oomwatch.units import fmt_bytes

# Codes from the most to the least actionable (a summary ranks its rows by this order).
CAUSE_CODES: tuple[DeviceCauseCode, ...] = (
    "device-fragmentation",
    "device-shared",
    "device-too-large",
    "device-footprint",
)
SHARED_MIN_SHARE = 0.10  # others hold at least this share of the device's capacity
FOOTPRINT_MIN_SHARE = 0.5  # this process holds at least this share
EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def _num(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def named_others(alloc: dict[str, Any]) -> list[tuple[int, int]]:
    """(pid, bytes) of the other processes torch's message named."""
    found = alloc.get("other_processes")
    if not isinstance(found, list):
        return []
    out = []
    for item in found:
        if isinstance(item, dict):
            pid, size = _num(item, "pid"), _num(item, "bytes")
            if pid is not None and size is not None:
                out.append((pid, size))
    return out


def others_bytes(alloc: dict[str, Any]) -> int | None:
    """What other processes hold on the device: capacity − free − this process."""
    total, free = _num(alloc, "total_bytes"), _num(alloc, "free_bytes")
    mine = _num(alloc, "process_bytes")
    if total is None or free is None or mine is None:
        return None
    return max(total - free - mine, 0)


def device_cause(incident: Incident) -> Finding | None:
    """The cause finding of a framework OOM, or None when the numbers do not decide one."""
    facts = framework_oom(incident)
    if facts is None:
        return None
    alloc = incident.allocator or {}
    total, requested = _num(alloc, "total_bytes"), _num(alloc, "requested_bytes")
    free = _num(alloc, "free_bytes")
    evidence: dict[str, Any] = {"requested_bytes": requested, "total_bytes": total}
    if requested is not None and total is not None and requested > total:
        return Finding(
            "device-too-large",
            "critical",
            (
                f"Request larger than the device: {fmt_bytes(requested)} asked of a device of"
                f" {fmt_bytes(total)}; no setting fits it, only a smaller request (batch size,"
                " model shards, activation checkpointing) does."
            ),
            evidence,
        )
    if facts.evidence.get("fragmented"):
        idle = facts.evidence.get("reserved_unallocated_bytes")
        largest = facts.evidence.get("largest_free_block_bytes")
        evidence.update(reserved_unallocated_bytes=idle, largest_free_block_bytes=largest)
        words = "free memory in the allocator's segments"
        if isinstance(idle, int) and idle:
            words = f"{fmt_bytes(idle)} reserved by the caching allocator but unallocated"
        if isinstance(largest, int):
            words += f", largest free block {fmt_bytes(largest)}"
        return Finding(
            "device-fragmentation",
            "critical",
            (
                f"Fragmentation of the caching allocator: {words}; {EXPANDABLE} lets it use"
                " that memory, a smaller batch is not needed."
            ),
            evidence,
        )
    others = others_bytes(alloc)
    named = named_others(alloc)
    if (
        others is not None
        and total
        and others >= SHARED_MIN_SHARE * total
        and (requested is None or free is None or requested <= free + others)
    ):
        evidence.update(
            others_bytes=others,
            other_processes=[{"pid": pid, "bytes": size} for pid, size in named],
        )
        if named:
            who = ", ".join(f"process {pid} {fmt_bytes(size)}" for pid, size in named[:3])
        else:
            who = "none of them visible from this container (another container's)"
        return Finding(
            "device-shared",
            "critical",
            (
                f"Others hold {fmt_bytes(others)} of the {fmt_bytes(total)} device, {who}:"
                " lowering this job's batch size is not the fix; give it a device of its"
                " own (time-slicing and MPS share memory without limits) or end what holds it (a"
                " zombie worker of an earlier run)."
            ),
            evidence,
        )
    mine = _num(alloc, "process_bytes") or _num(alloc, "allocated_bytes")
    if mine is not None and total and mine >= FOOTPRINT_MIN_SHARE * total:
        evidence["process_bytes"] = mine
        return Finding(
            "device-footprint",
            "warning",
            (
                f"This job fills the device itself: {fmt_bytes(mine)} of {fmt_bytes(total)};"
                " lower the batch size or the model's footprint (mixed precision, activation"
                " checkpointing, sharding)."
            ),
            evidence,
        )
    return None
