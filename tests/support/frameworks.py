"""Framework OOMs as the probe's join builds them (oomwatch.probe.join.framework_incident),
from torch's message: for the diagnosis and report tests.

SHARED is the message torch 2.11 printed on an H100 with a second process holding 40.5 GiB
(shared/notes/verified-here.md, 2026-11-26); HIDDEN is the same without the "Process N has"
clause, as torch prints it when NVML cannot see the other process (another PID namespace).
The others follow torch's format with the numbers of the runs issue 25 describes."""

from __future__ import annotations

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
CLAIM = {"pod_uid": "5f0c", "namespace": "ml", "pod": "trainer-0", "container": "trainer",
         "cgroup": None}  # fmt: skip


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
