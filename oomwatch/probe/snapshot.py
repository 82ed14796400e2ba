"""What the CUDA caching allocator held when a CUDA OOM was raised: a summary of
`torch.cuda.memory_snapshot()` small enough for a flight-recorder slot.

The OOM message says how much was reserved and allocated; only the snapshot says how the free
part of the reserved memory lies: one block large enough for the request, or many small ones
inside segments that still hold live tensors (fragmentation, which
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` addresses).  The segments' structure is
torch's documented snapshot format (torch/cuda/memory.py, `_snapshot`): each segment is one
cudaMalloc (`total_size`, `allocated_size`, `active_size`, `segment_type`, `device`) split into
`blocks` whose `state` is `active_allocated`, `active_awaiting_free` (older torch:
`active_pending_free`) or `inactive` (free for reuse).  Everything is read defensively: a
value of the wrong type is skipped, never trusted.  No allocation happens on the device.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any

TOP_SEGMENTS = 4
_DEVICE_INDEX = re.compile(r"(\d+)$")


def device_index(device: str | None) -> int | None:
    """`cuda:1` -> 1 (the index a snapshot's segments carry); None when not named."""
    match = _DEVICE_INDEX.search(device or "")
    return int(match.group(1)) if match else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _free_blocks(segment: dict[str, Any]) -> list[int]:
    blocks = segment.get("blocks")
    if not isinstance(blocks, list):
        return []
    return [
        _int(b.get("size")) for b in blocks if isinstance(b, dict) and b.get("state") == "inactive"
    ]


def summarize_segments(segments: Iterable[Any], device: int | None) -> dict[str, Any] | None:
    """The summary of one device's segments (all devices' when `device` is None), or None
    when there are none: totals, the largest free block, the free bytes stuck in segments that
    still hold live blocks, fragmentation, and the largest segments."""
    mine = [
        s
        for s in segments
        if isinstance(s, dict) and (device is None or s.get("device") in (device, None))
    ]
    if not mine:
        return None
    free = [size for s in mine for size in _free_blocks(s)]
    stuck = sum(
        sum(_free_blocks(s)) for s in mine if _int(s.get("active_size")) > 0
    )  # empty_cache() cannot release these: live blocks share their segment
    free_total, largest_free = sum(free), max(free, default=0)
    ranked = sorted(mine, key=lambda s: -_int(s.get("total_size")))[:TOP_SEGMENTS]
    return {
        "device": device,
        "segments": len(mine),
        "reserved_bytes": sum(_int(s.get("total_size")) for s in mine),
        "allocated_bytes": sum(_int(s.get("allocated_size")) for s in mine),
        "active_bytes": sum(_int(s.get("active_size")) for s in mine),
        "inactive_split_bytes": stuck,
        "largest_free_block_bytes": largest_free,
        "fragmentation": round(1.0 - largest_free / free_total, 4) if free_total else 0.0,
        "largest_segments": [_segment(s) for s in ranked],
    }


def _segment(segment: dict[str, Any]) -> dict[str, Any]:
    blocks = segment.get("blocks")
    kind = segment.get("segment_type")
    return {
        "total_bytes": _int(segment.get("total_size")),
        "allocated_bytes": _int(segment.get("allocated_size")),
        "active_bytes": _int(segment.get("active_size")),
        "largest_free_block_bytes": max(_free_blocks(segment), default=0),
        "blocks": len(blocks) if isinstance(blocks, list) else 0,
        "segment_type": kind[:16] if isinstance(kind, str) else None,
    }


def cuda_snapshot(device: str | None) -> dict[str, Any] | None:
    """The summary for the device a CUDA OOM named, from the live allocator; None without
    torch's CUDA in use, or if the snapshot fails (a probe never raises into training)."""
    torch: Any = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        try:  # torch 2.10+: no stack traces, the fast snapshot
            segments = torch.cuda.memory_snapshot(include_traces=False)
        except TypeError:
            segments = torch.cuda.memory_snapshot()
        return summarize_segments(segments, device_index(device))
    except Exception:
        return None
