"""Framework OOM messages as PyTorch and TensorFlow print them (texts seen in real logs)."""

from __future__ import annotations

from oomwatch.probe.oom_messages import parse_tf_oom, parse_torch_oom, torch_device_type

GiB, MiB = 1 << 30, 1 << 20

# torch >= 2.1 (c10/cuda/CUDACachingAllocator.cpp), docs.pytorch.org ending of 2.14.
TORCH_CURRENT = (
    "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 10.56 GiB "
    "of which 3.49 GiB is free. Including non-PyTorch memory, this process has 7.06 GiB memory "
    "in use. Of the allocated memory 6.78 GiB is allocated by PyTorch, and 97.98 MiB is reserved "
    "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html"
    "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)
# Other processes listed by NVML, and a build that prints no device number.
TORCH_NO_DEVICE = (
    "CUDA out of memory. Tried to allocate 224.00 MiB. GPU  has a total capacity of 44.34 GiB of "
    "which 160.81 MiB is free. Process 47694 has 44.17 GiB memory in use. Of the allocated memory "
    "43.36 GiB is allocated by PyTorch, and 396.27 MiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
# torch <= 2.0
TORCH_OLD = (
    "CUDA out of memory. Tried to allocate 338.00 MiB (GPU 0; 2.00 GiB total capacity; 1.44 GiB "
    "already allocated; 0 bytes free; 1.50 GiB reserved in total by PyTorch) If reserved memory "
    "is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
    "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
)
TORCH_REJECTED = (
    "CUDA out of memory. Allocation was preemptively rejected because it would exceed "
    "per_process_memory_fraction limit. Requested size: 2.00 GiB"
)
# torch 2.1 misspelt "capacity" (carolchenyx/MGFN. issue 35).
TORCH_2_1 = (
    "CUDA out of memory. Tried to allocate 1.70 GiB. GPU 0 has a total capacty of 6.00 GiB of "
    "which 0 bytes is free. Of the allocated memory 2.93 GiB is allocated by PyTorch, and 2.30 "
    "GiB is reserved by PyTorch but unallocated."
)
# Intel GPUs (intel/torch-xpu-ops issue 3011) and ROCm (ROCm/TheRock issue 2118).
TORCH_XPU = (
    "XPU out of memory. Tried to allocate 4.66 GiB. GPU 0 has a total capacity of 5.65 GiB of "
    "which 5.65 GiB is free. Of the allocated memory 195.50 KiB is allocated by PyTorch, and "
    "1.81 MiB is reserved by PyTorch but unallocated. Please use `empty_cache` to release all "
    "unoccupied cached memory."
)
TORCH_HIP = (
    "HIP out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 287.98 GiB of "
    "which 275.86 GiB is free. 1.05 GiB allowed; Of the allocated memory 1017.01 MiB is allocated "
    "by PyTorch, with 17.00 MiB allocated in private pools (e.g., HIP Graphs), and 54.99 MiB is "
    "reserved by PyTorch but unallocated."
)
# Apple GPUs, current and older units (Comfy-Org/ComfyUI issue 7440, lllyasviel/Fooocus 1139).
TORCH_MPS = (
    "MPS backend out of memory (MPS allocated: 9.57 GiB, other allocations: 17.35 GiB, max "
    "allowed: 27.20 GiB). Tried to allocate 292.50 MiB on private pool. Use "
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may "
    "cause system failure)."
)
TORCH_MPS_OLD = (
    "MPS backend out of memory (MPS allocated: 8.89 GB, other allocations: 172.98 MB, max "
    "allowed: 9.07 GB). Tried to allocate 6.25 MB on private pool."
)
TF_GPU = (
    "OOM when allocating tensor with shape[500,512,4,4] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
)


def close(value: int | None, expected: float) -> bool:
    return value is not None and abs(value - expected) <= 0.006 * expected + 1


def test_current_torch_format() -> None:
    p = parse_torch_oom(TORCH_CURRENT)
    assert p.device == "cuda:0"
    assert p.requested_bytes == 4 * GiB
    assert close(p.total_bytes, 10.56 * GiB) and close(p.free_bytes, 3.49 * GiB)
    assert close(p.allocated_bytes, 6.78 * GiB)
    assert close(p.reserved_unallocated_bytes, 97.98 * MiB)


def test_torch_without_device_number_and_other_processes() -> None:
    p = parse_torch_oom(TORCH_NO_DEVICE)
    assert p.device is None
    assert p.requested_bytes == 224 * MiB
    assert close(p.free_bytes, 160.81 * MiB)
    assert close(p.reserved_unallocated_bytes, 396.27 * MiB)


def test_old_torch_format_derives_reserved_but_unallocated() -> None:
    p = parse_torch_oom(TORCH_OLD)
    assert p.device == "cuda:0" and p.requested_bytes == 338 * MiB
    assert p.free_bytes == 0 and p.total_bytes == 2 * GiB
    assert close(p.reserved_unallocated_bytes, (1.50 - 1.44) * GiB)


def test_preemptive_rejection_gives_the_request() -> None:
    p = parse_torch_oom(TORCH_REJECTED)
    assert p.requested_bytes == 2 * GiB and p.free_bytes is None


def test_tensorflow_shape_and_device() -> None:
    p = parse_tf_oom(TF_GPU)
    assert p.device == "GPU:0"
    assert p.requested_bytes == 500 * 512 * 4 * 4 * 4


def test_unrelated_text_gives_nothing() -> None:
    assert parse_torch_oom("CUDA error: an illegal memory access") == parse_tf_oom("x")
    assert parse_torch_oom("GPU 0 has a total capacity of lots").requested_bytes is None


def test_the_device_each_torch_backend_names() -> None:
    names = [TORCH_CURRENT, TORCH_OLD, TORCH_HIP, TORCH_XPU, TORCH_MPS, "weird OOM"]
    assert [torch_device_type(m) for m in names] == ["cuda", "cuda", "cuda", "xpu", "mps", None]


def test_xpu_rocm_and_torch_2_1_in_the_current_format() -> None:
    xpu = parse_torch_oom(TORCH_XPU)
    assert xpu.device == "xpu:0" and close(xpu.requested_bytes, 4.66 * GiB)
    assert close(xpu.reserved_unallocated_bytes, 1.81 * MiB)
    hip = parse_torch_oom(TORCH_HIP)
    assert hip.device == "cuda:0"  # ROCm GPUs are torch "cuda" devices
    assert close(hip.allocated_bytes, 1017.01 * MiB)
    assert close(hip.reserved_unallocated_bytes, 54.99 * MiB)
    old = parse_torch_oom(TORCH_2_1)
    assert old.total_bytes == 6 * GiB and old.free_bytes == 0
    assert close(old.reserved_unallocated_bytes, 2.30 * GiB)


def test_mps_allocated_watermark_and_request() -> None:
    mps = parse_torch_oom(TORCH_MPS)
    assert mps.device == "mps" and close(mps.requested_bytes, 292.5 * MiB)
    assert close(mps.allocated_bytes, 9.57 * GiB) and close(mps.total_bytes, 27.20 * GiB)
    old = parse_torch_oom(TORCH_MPS_OLD)  # "GB" there is 2**30 bytes
    assert close(old.requested_bytes, 6.25 * MiB) and close(old.total_bytes, 9.07 * GiB)
