"""Framework OOM messages as PyTorch and TensorFlow print them (texts seen in real logs)."""

from __future__ import annotations

from oomwatch.probe.oom_messages import parse_tf_oom, parse_torch_cuda_oom

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
TF_GPU = (
    "OOM when allocating tensor with shape[500,512,4,4] and type float on "
    "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"
)


def close(value: int | None, expected: float) -> bool:
    return value is not None and abs(value - expected) <= 0.006 * expected + 1


def test_current_torch_format() -> None:
    p = parse_torch_cuda_oom(TORCH_CURRENT)
    assert p.device == "cuda:0"
    assert p.requested_bytes == 4 * GiB
    assert close(p.total_bytes, 10.56 * GiB) and close(p.free_bytes, 3.49 * GiB)
    assert close(p.allocated_bytes, 6.78 * GiB)
    assert close(p.reserved_unallocated_bytes, 97.98 * MiB)


def test_torch_without_device_number_and_other_processes() -> None:
    p = parse_torch_cuda_oom(TORCH_NO_DEVICE)
    assert p.device is None
    assert p.requested_bytes == 224 * MiB
    assert close(p.free_bytes, 160.81 * MiB)
    assert close(p.reserved_unallocated_bytes, 396.27 * MiB)


def test_old_torch_format_derives_reserved_but_unallocated() -> None:
    p = parse_torch_cuda_oom(TORCH_OLD)
    assert p.device == "cuda:0" and p.requested_bytes == 338 * MiB
    assert p.free_bytes == 0 and p.total_bytes == 2 * GiB
    assert close(p.reserved_unallocated_bytes, (1.50 - 1.44) * GiB)


def test_preemptive_rejection_gives_the_request() -> None:
    p = parse_torch_cuda_oom(TORCH_REJECTED)
    assert p.requested_bytes == 2 * GiB and p.free_bytes is None


def test_tensorflow_shape_and_device() -> None:
    p = parse_tf_oom(TF_GPU)
    assert p.device == "GPU:0"
    assert p.requested_bytes == 500 * 512 * 4 * 4 * 4


def test_unrelated_text_gives_nothing() -> None:
    assert parse_torch_cuda_oom("CUDA error: an illegal memory access") == parse_tf_oom("x")
    assert parse_torch_cuda_oom("GPU 0 has a total capacity of lots").requested_bytes is None
