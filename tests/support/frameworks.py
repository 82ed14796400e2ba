"""Framework OOMs as the probe's join builds them (oomwatch.probe.join.framework_incident),
from torch's message: for the diagnosis and report tests.

SHARED is the message torch 2.11 printed on an H100 with a second process holding 40.5 GiB
(shared/notes/verified-here.md, 2026-11-26); HIDDEN is the same without the "Process N has"
clause, as torch prints it when NVML cannot see the other process (another PID namespace).
The others follow torch's format with the numbers of the GPU runs bench/RESULTS.md records
(bench/gpu_check.py)."""

from __future__ import annotations

from collections import OrderedDict
from itertools import product
from typing import Any

from oomwatch.diagnosis import diagnose
from oomwatch.incident import Incident
from oomwatch.probe.oom_messages import parse_torch_oom

GIB = 1 << 30
SHARED = (
    "CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total capacity of 79.18 GiB of"
    " which 18.15 GiB is free. Process 439 has 40.51 GiB memory in use. Including non-PyTorch"
    " memory, this process has 20.51 GiB memory in use. Of the allocated memory 20.00 GiB is"
    " allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but"
    " unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    " to avoid fragmentation."
)
HIDDEN = SHARED.replace(" Process 439 has 40.51 GiB memory in use.", "")
FRAGMENTED = (
    "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.18 GiB of"
    " which 2.44 GiB is free. Including non-PyTorch memory, this process has 76.18 GiB memory in"
    " use. Of the allocated memory 57.00 GiB is allocated by PyTorch, and 19.00 GiB is reserved"
    " by PyTorch but unallocated."
)
TOO_LARGE = (
    "CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity of 79.18 GiB"
    " of which 78.60 GiB is free. Including non-PyTorch memory, this process has 590.00 MiB"
    " memory in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is"
    " reserved by PyTorch but unallocated."
)
FOOTPRINT = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB of"
    " which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.50 GiB memory in"
    " use. Of the allocated memory 76.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved"
    " by PyTorch but unallocated."
)
CLAIM = {
    "pod_uid": "5f0c",
    "namespace": "ml",
    "pod": "trainer-0",
    "container": "trainer",
    "cgroup": None,
}


def framework(message: str, **extra: Any) -> Incident:
    """A framework incident as oomwatch.probe.join builds it from a probe's event."""
    parsed = parse_torch_oom(message)
    allocator = {
        "source": "probe",
        "framework": "torch-cuda",
        "device": parsed.device,
        "requested_bytes": parsed.requested_bytes,
        "free_bytes": parsed.free_bytes,
        "total_bytes": parsed.total_bytes,
        "allocated_bytes": parsed.allocated_bytes,
        "reserved_unallocated_bytes": parsed.reserved_unallocated_bytes,
        "process_bytes": parsed.process_bytes,
        "other_processes": [{"pid": p, "bytes": b} for p, b in parsed.other_processes],
        "message": message,
        "claimed": CLAIM,
        "identity": "unverified",
        **extra,
    }
    return diagnose(Incident(kind="framework", allocator=allocator))


MiB = 1 << 20


def memory_stats_after_one_64_mib_tensor() -> OrderedDict[str, int]:
    """`torch.cuda.memory_stats()` as torch returns it (sorted, flattened keys, ints) after
    `torch.empty(64 << 20, dtype=torch.uint8, device="cuda")`: every key torch documents."""
    per_pool = {
        "allocated_bytes": 64 * MiB,
        "reserved_bytes": 64 * MiB,
        "active_bytes": 64 * MiB,
        "requested_bytes": 64 * MiB,
        "inactive_split_bytes": 0,
        "allocation": 1,
        "segment": 1,
        "active": 1,
        "inactive_split": 0,
    }
    stats: dict[str, int] = {}
    for (stat, value), pool, metric in product(
        per_pool.items(), ("all", "large_pool", "small_pool"), ("current", "peak", "allocated")
    ):
        stats[f"{stat}.{pool}.{metric}"] = 0 if pool == "small_pool" else value
    for stat, pool in product(per_pool, ("all", "large_pool", "small_pool")):
        stats[f"{stat}.{pool}.freed"] = 0
    for metric in ("current", "peak", "allocated", "freed"):
        stats[f"oversize_allocations.{metric}"] = 0
        stats[f"oversize_segments.{metric}"] = 0
    stats |= {
        "max_split_size": -1,  # torch's "no limit": a negative that must not be kept
        "num_alloc_retries": 0,
        "num_device_alloc": 1,
        "num_device_free": 0,
        "num_oom_rejections": 0,
        "num_ooms": 1,
        "num_sync_all_streams": 0,
    }
    return OrderedDict(sorted(stats.items()))
