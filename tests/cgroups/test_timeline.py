"""The memory timeline on file trees: v1/v2 names, limits, the bounded ring, and freezing."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from support.cgroupfs import CONTAINER, CgroupV2Tree

from oomwatch.cgroup_identity import identify
from oomwatch.cgroups import TimelineSampler, WatchedCgroup
from oomwatch.cgroups.timeline_snapshot import growth_rate, summarize
from oomwatch.incident import TimelineSample

MiB = 1 << 20


def _container(tree: CgroupV2Tree) -> WatchedCgroup:
    return WatchedCgroup(CONTAINER, str(tree.path(CONTAINER)), 2, identify(CONTAINER))


def test_v2_sample_reads_usage_limit_and_breakdown(fake_v2: CgroupV2Tree) -> None:
    d = fake_v2.path(CONTAINER)
    (d / "memory.current").write_text(f"{100 * MiB}\n")
    (d / "memory.stat").write_text(
        f"anon {60 * MiB}\nfile {30 * MiB}\nkernel {5 * MiB}\nkernel_stack 4096\n"
        f"shmem {2 * MiB}\nfile_mapped 0\nanon_thp {4 * MiB}\nfile_thp 0\n"
        f"inactive_anon {60 * MiB}\nactive_anon 0\ninactive_file {25 * MiB}\n"
    )
    sampler = TimelineSampler()
    [(cg, sample)] = sampler.sample([_container(fake_v2)], now_s=1.0)
    assert cg.relpath == CONTAINER
    assert sample == TimelineSample(
        1.0, 100 * MiB, 256 * MiB, 60 * MiB, 30 * MiB, 2 * MiB, 4 * MiB, 5 * MiB, 25 * MiB
    )
    assert sample.working_set_bytes == 75 * MiB  # what kubelet calls the working set
    sampler.close()


def test_v2_kernel_from_parts_and_unlimited(fake_v2: CgroupV2Tree) -> None:
    d = fake_v2.path(CONTAINER)
    (d / "memory.max").write_text("max\n")
    (d / "memory.current").write_text("4096\n")
    (d / "memory.stat").write_text("anon 0\nkernel_stack 16384\npagetables 8192\nslab 1000\n")
    sampler = TimelineSampler()
    [(_, sample)] = sampler.sample([_container(fake_v2)], now_s=1.0)
    assert sample.limit_bytes is None
    assert sample.kernel_bytes == 16384 + 8192 + 1000
    sampler.close()


def test_v1_names(tmp_path: Path) -> None:
    d = tmp_path / "memory" / "kubepods" / "pod1" / "c1"
    d.mkdir(parents=True)
    (d / "memory.usage_in_bytes").write_text(f"{50 * MiB}\n")
    (d / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1 "unlimited"
    (d / "memory.stat").write_text(
        f"cache 1\nrss 2\nrss_huge 3\nshmem 4\ntotal_cache {10 * MiB}\ntotal_rss {40 * MiB}\n"
        f"total_rss_huge {2 * MiB}\ntotal_shmem {MiB}\ninactive_file 5\n"
        f"total_inactive_file {8 * MiB}\n"
    )
    cg = WatchedCgroup("/kubepods/pod1/c1", str(d), 1, identify("/kubepods/pod1/c1"))
    sampler = TimelineSampler()
    [(_, sample)] = sampler.sample([cg], now_s=7.0)
    assert sample == TimelineSample(
        7.0, 50 * MiB, None, 40 * MiB, 10 * MiB, MiB, 2 * MiB, None, 8 * MiB
    )
    assert sample.working_set_bytes == 42 * MiB
    frozen = sampler.freeze(cg.relpath, 8.0)
    assert frozen is not None and frozen.samples == [sample]  # kept in the ring too
    sampler.close()


def test_only_container_level_cgroups_are_sampled(fake_v2: CgroupV2Tree) -> None:
    pod = "/kubepods/burstable/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    cg = WatchedCgroup(pod, str(fake_v2.path(pod)), 2, identify(pod))
    assert TimelineSampler().sample([cg], now_s=1.0) == []


def test_growth_is_frozen_into_the_timeline_and_the_ring_is_bounded(fake_v2: CgroupV2Tree) -> None:
    cg = _container(fake_v2)
    current = fake_v2.path(CONTAINER) / "memory.current"
    sampler = TimelineSampler(interval_s=1.0, window_s=10.0)
    for t in range(30):  # 2 MiB/s growth
        current.write_text(f"{(10 + 2 * t) * MiB}\n")
        sampler.sample([cg], now_s=1000.0 + t)
    current.write_text("0\n")  # after the kill
    sampler.sample([cg], now_s=1030.0)
    timeline = sampler.freeze(CONTAINER, at_s=1029.5)
    assert timeline is not None
    assert len(timeline.samples) == 10  # the ring holds the window, no more
    assert timeline.samples[-1].t_seconds == 1029.0
    assert timeline.usage_at_kill_bytes == (10 + 2 * 29) * MiB
    assert timeline.peak_bytes == (10 + 2 * 29) * MiB
    assert timeline.growth_bytes_per_second == pytest.approx(2 * MiB)
    assert timeline.interval_seconds == 1.0
    assert sampler.freeze("/never/sampled", at_s=1029.5) is None


def test_the_ring_keeps_the_last_minute_whole_and_one_sample_per_10_s_before(
    fake_v2: CgroupV2Tree,
) -> None:
    """A 10-minute window at 1 Hz: at most 173 samples in the ring, not 601; the frozen
    timeline still spans the window from its first sample (when growth began matters to the
    forecast) and its growth rate is the leak's."""
    cg = _container(fake_v2)
    current = fake_v2.path(CONTAINER) / "memory.current"
    sampler = TimelineSampler(interval_s=1.0, window_s=600.0)
    for t in range(700):  # 64 KiB/s growth for 11.7 minutes
        current.write_text(f"{(10 * MiB) + 64 * 1024 * t}\n")
        sampler.sample([cg], now_s=1000.0 + t)
    timeline = sampler.freeze(CONTAINER, at_s=1699.5)
    assert timeline is not None
    times = [s.t_seconds for s in timeline.samples]
    assert times[-61:] == [1639.0 + k for k in range(61)]  # the last minute, every sample
    older = times[:-61]  # two per 10 s: its lowest and its highest (first and last here)
    assert all(1.0 <= b - a <= 9.0 for a, b in itertools.pairwise(older)), older
    assert older[0] == 1100.0 and len(timeline.samples) <= 173  # the window, from its start
    assert timeline.growth_bytes_per_second == pytest.approx(64 * 1024, rel=0.01)


def test_the_coarse_part_of_the_ring_keeps_each_steps_peak(fake_v2: CgroupV2Tree) -> None:
    """A 7 s sawtooth seen minutes later: the coarse samples keep its peaks (the forecast
    compares new growth with the peak it came back from) and its troughs."""
    cg = _container(fake_v2)
    current = fake_v2.path(CONTAINER) / "memory.current"
    sampler = TimelineSampler(interval_s=1.0, window_s=600.0)
    for t in range(300):
        current.write_text(f"{(10 + (t % 7)) * MiB}\n")
        sampler.sample([cg], now_s=1000.0 + t)
    timeline = sampler.freeze(CONTAINER, at_s=1299.5)
    assert timeline is not None
    older = [s.usage_bytes for s in timeline.samples[:-61]]
    assert sorted(set(older)) == [10 * MiB, 16 * MiB]  # troughs and peaks
    assert older.count(16 * MiB) >= 23  # a peak in each 10 s step (of 24)


def test_vanished_cgroup_keeps_its_ring_for_the_freeze(fake_v2: CgroupV2Tree) -> None:
    cg = _container(fake_v2)
    sampler = TimelineSampler(interval_s=1.0, window_s=60.0)
    sampler.sample([cg], now_s=1.0)
    sampler.sample([], now_s=2.0)  # the watcher no longer lists it
    timeline = sampler.freeze(CONTAINER, at_s=2.0)
    assert timeline is not None and len(timeline.samples) == 1
    sampler.sample([], now_s=100.0)
    assert sampler.freeze(CONTAINER, at_s=100.0) is None  # dropped after the window


def test_summarize_and_growth_edge_cases() -> None:
    assert summarize([], at_s=5.0, window_s=10.0, interval_s=1.0) is None
    one = summarize([TimelineSample(1.0, 100)], at_s=5.0, window_s=10.0, interval_s=1.0)
    assert one is not None and one.growth_bytes_per_second is None and one.peak_bytes == 100
    assert one.interval_seconds == 1.0  # one sample: the configured period
    assert growth_rate([1.0, 1.0], [1, 2]) is None
    assert growth_rate([0.0, 1.0, 2.0], [10, 8, 6]) == pytest.approx(-2.0)


def test_a_window_sampled_calmly_then_closely_says_its_longest_gap() -> None:
    calm_then_close = [TimelineSample(t, 100 + int(t)) for t in (0.0, 10.0, 20.0, 21.0, 22.0)]
    frozen = summarize(calm_then_close, at_s=22.5, window_s=60.0, interval_s=1.0)
    assert frozen is not None and frozen.interval_seconds == 10.0  # not the 1 s period
