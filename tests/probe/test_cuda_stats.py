"""CUDA allocator statistics survive the flight recorder: the sampler's conversion, the writer,
the file, the reader's schema and the join, without a GPU (torch.cuda itself is not faked)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from itertools import product
from pathlib import Path

from oomwatch.incident import Incident
from oomwatch.probe.join import ProbeEnricher
from oomwatch.probe.reader import ProbeDirReader
from oomwatch.probe.sampler import cuda_stats_from_memory_stats
from oomwatch.probe.schema import sample_from_payload, to_payload

from .conftest import META, sample, write_record

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


def test_cuda_stats_round_trip_through_the_schema() -> None:
    cuda = cuda_stats_from_memory_stats(0, memory_stats_after_one_64_mib_tensor())
    payload = to_payload(replace(sample(0), cuda=cuda))
    back = sample_from_payload(payload, seq=1)  # raised SchemaError while device was an int
    assert back.cuda == cuda
    assert cuda["device"] == "cuda:0" and cuda["allocated_bytes"] == 64 * MiB
    assert cuda["reserved_peak_bytes"] == 64 * MiB and cuda["num_ooms"] == 1


def test_cuda_samples_reach_the_allocator_section(probe_dir: Path) -> None:
    stats = memory_stats_after_one_64_mib_tensor()
    cuda = cuda_stats_from_memory_stats(1, stats)
    write_record(probe_dir, samples=[replace(sample(i), cuda=cuda) for i in range(3)])
    (record,) = ProbeDirReader(probe_dir).read_all()  # the daemon keeps the file
    assert record.samples[-1].cuda == cuda
    incident = Incident(kind="memcg", kernel_time_s=1003.5, boot_id="b0", task_memcg=META.cgroup)
    ProbeEnricher(probe_dir).enrich(incident)
    alloc = incident.allocator
    assert alloc is not None and alloc["last_sample"]["cuda"]["device"] == "cuda:1"
    assert alloc["peak"]["cuda_reserved_bytes"] == 64 * MiB
