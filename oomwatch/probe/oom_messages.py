"""Parse the text of framework out-of-memory errors into numbers (pure functions).

PyTorch's CUDA caching allocator and TensorFlow's `OpKernelContext::allocate_tensor` say in
words what was requested and what was free; those numbers are what turns "CUDA OOM" into a
diagnosis (too big a batch vs fragmentation: "reserved but unallocated" is large).
Patterns are anchored on the fixed text of the formats in c10/cuda/CUDACachingAllocator.cpp
(current and <= 2.0), which XPU (and ROCm, as "HIP") builds print with their own device name,
torch's MPS allocator, and tensorflow/core/framework/op_kernel.cc.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_SIZE = r"(\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB|TiB)"
# Older MPS allocators print KB/MB/GB but divide by powers of 1024.
_MPS_SIZE = r"(\d+(?:\.\d+)?) (bytes|KiB|MiB|GiB|TiB|KB|MB|GB)"
_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_UNITS |= {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}

# The device type torch's OOM message names: ROCm builds say HIP for what torch calls "cuda".
_TORCH_DEVICE = re.compile(r"\b(?:(CUDA|HIP|XPU) out of memory|(MPS) backend out of memory)")
_DEVICE_TYPES = {"CUDA": "cuda", "HIP": "cuda", "XPU": "xpu", "MPS": "mps"}
_TORCH_REQUESTED = re.compile(r"(?:CUDA|HIP|XPU) out of memory\. Tried to allocate " + _SIZE)
_TORCH_MPS = re.compile(
    r"MPS backend out of memory \(MPS allocated: "
    + _MPS_SIZE
    + r", other allocations: "
    + _MPS_SIZE
    + r", max allowed: "
    + _MPS_SIZE
    + r"\)\. Tried to allocate "
    + _MPS_SIZE
)
# Some builds print no device number ("GPU  has a total capacity"), seen from TGI; torch 2.1
# printed "capacty".
_TORCH_CAPACITY = re.compile(
    r"GPU (\d*) ?has a total capaci?ty of " + _SIZE + " of which " + _SIZE + " is free"
)
_TORCH_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + " is allocated by PyTorch")
_TORCH_UNALLOCATED = re.compile(_SIZE + r" is reserved by PyTorch but unallocated")
# What this process holds on the device, and the other processes NVML lets torch see (absent
# where they live in another PID namespace: another container's).
_TORCH_THIS_PROCESS = re.compile(r"this process has " + _SIZE + " memory in use")
_TORCH_OTHER_PROCESS = re.compile(r"Process (\d{1,10}) has " + _SIZE + " memory in use")
MAX_OTHER_PROCESSES = 8
_TORCH_OLD = re.compile(
    r"\(GPU (\d+); "
    + _SIZE
    + r" total capacity; "
    + _SIZE
    + r" already allocated; "
    + _SIZE
    + r" free; "
    + _SIZE
    + r" reserved in total by PyTorch\)"
)
_TORCH_REJECTED = re.compile(
    r"(?:CUDA|HIP|XPU) out of memory\. Allocation was preemptively rejected "
    r".*?Requested size: " + _SIZE
)
_TF_OOM = re.compile(
    r"OOM when allocating tensor with shape\s*\[([\d,\s]*)\] and type (\w+) on (\S+) "
    r"by allocator (\S+)"
)
_TF_DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "half": 2,
    "bfloat16": 2,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}
_DEVICE_SUFFIX = re.compile(r"device:([A-Z]+:\d+)$")


@dataclass(frozen=True, slots=True)
class ParsedOom:
    """The numbers a framework OOM message gave; None where the message did not say."""

    device: str | None = None
    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None  # held by the framework's live tensors
    reserved_unallocated_bytes: int | None = None  # cached by the allocator, not in use
    process_bytes: int | None = None  # this process on the device, non-framework memory too
    other_processes: tuple[tuple[int, int], ...] = ()  # (pid, bytes) torch named, at most 8


def _bytes(number: str, unit: str) -> int:
    return round(float(number) * _UNITS[unit])


def torch_device_type(message: str) -> str | None:
    """`cuda`, `xpu` or `mps`: the device a `torch.OutOfMemoryError` message names, if any."""
    match = _TORCH_DEVICE.search(message)
    return _DEVICE_TYPES[match.group(1) or match.group(2)] if match else None


def parse_torch_oom(message: str) -> ParsedOom:
    """Numbers from a `torch.OutOfMemoryError` message (CUDA/XPU either format, or MPS)."""
    mps = _TORCH_MPS.search(message)
    if mps:
        return ParsedOom(
            device="mps",
            requested_bytes=_bytes(mps.group(7), mps.group(8)),
            total_bytes=_bytes(mps.group(5), mps.group(6)),  # the high watermark
            allocated_bytes=_bytes(mps.group(1), mps.group(2)),
        )
    device_type = torch_device_type(message) or "cuda"
    requested = _TORCH_REQUESTED.search(message)
    rejected = _TORCH_REJECTED.search(message)
    requested_bytes = None
    if requested:
        requested_bytes = _bytes(requested.group(1), requested.group(2))
    elif rejected:
        requested_bytes = _bytes(rejected.group(1), rejected.group(2))
    capacity = _TORCH_CAPACITY.search(message)
    if capacity:
        allocated = _TORCH_ALLOCATED.search(message)
        unallocated = _TORCH_UNALLOCATED.search(message)
        this = _TORCH_THIS_PROCESS.search(message)
        return ParsedOom(
            device=f"{device_type}:{capacity.group(1)}" if capacity.group(1) else None,
            requested_bytes=requested_bytes,
            total_bytes=_bytes(capacity.group(2), capacity.group(3)),
            free_bytes=_bytes(capacity.group(4), capacity.group(5)),
            allocated_bytes=_bytes(allocated.group(1), allocated.group(2)) if allocated else None,
            reserved_unallocated_bytes=(
                _bytes(unallocated.group(1), unallocated.group(2)) if unallocated else None
            ),
            process_bytes=_bytes(this.group(1), this.group(2)) if this else None,
            other_processes=other_processes(message),
        )
    old = _TORCH_OLD.search(message)
    if old:
        allocated_bytes = _bytes(old.group(4), old.group(5))
        reserved_bytes = _bytes(old.group(8), old.group(9))
        return ParsedOom(
            device=f"{device_type}:{old.group(1)}",
            requested_bytes=requested_bytes,
            total_bytes=_bytes(old.group(2), old.group(3)),
            free_bytes=_bytes(old.group(6), old.group(7)),
            allocated_bytes=allocated_bytes,
            reserved_unallocated_bytes=max(reserved_bytes - allocated_bytes, 0),
        )
    return ParsedOom(requested_bytes=requested_bytes)


def other_processes(message: str) -> tuple[tuple[int, int], ...]:
    """(pid, bytes) of each "Process N has X memory in use" clause (the first few)."""
    found = []
    for match in _TORCH_OTHER_PROCESS.finditer(message):
        found.append((int(match.group(1)), _bytes(match.group(2), match.group(3))))
        if len(found) >= MAX_OTHER_PROCESSES:
            break
    return tuple(found)


def parse_tf_oom(message: str) -> ParsedOom:
    """Numbers from a TensorFlow `ResourceExhaustedError` ("OOM when allocating tensor ...")."""
    match = _TF_OOM.search(message)
    if not match:
        return ParsedOom()
    dims = [int(d) for d in match.group(1).replace(" ", "").split(",") if d]
    size = _TF_DTYPE_BYTES.get(match.group(2))
    device_match = _DEVICE_SUFFIX.search(match.group(3))
    return ParsedOom(
        device=device_match.group(1) if device_match else match.group(3)[:128],
        requested_bytes=math.prod(dims) * size if size is not None else None,
    )
