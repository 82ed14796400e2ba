"""CUDA allocator statistics survive the flight recorder: the sampler's conversion, the writer,
the file, the reader's schema and the join, without a GPU (torch.cuda itself is not faked)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from support.frameworks import memory_stats_after_one_64_mib_tensor
from support.probe_records import META, sample, write_record

from oomwatch.incident import Incident
from oomwatch.probe.join import ProbeEnricher
from oomwatch.probe.reader import ProbeDirReader
from oomwatch.probe.sampler import cuda_stats_from_memory_stats
from oomwatch.probe.schema import sample_from_payload, to_payload

MiB = 1 << 20


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
