"""Reading and parsing cgroupfs files: anchored keys, limits, growing reads, gone files."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.cgroups.files import CgroupFile, CgroupGone, keyed_value, parse_limit_bytes

V1_STAT = b"cache 1\nrss 2\nrss_huge 3\ntotal_cache 10\ntotal_rss 20\ntotal_rss_huge 30\n"


def test_keys_are_anchored_at_line_starts() -> None:
    assert keyed_value(V1_STAT, b"rss") == 2
    assert keyed_value(V1_STAT, b"cache") == 1
    assert keyed_value(V1_STAT, b"total_rss") == 20
    assert keyed_value(V1_STAT, b"rss_huge") == 3
    assert keyed_value(V1_STAT, b"swap") is None
    assert keyed_value(b"oom_kill notanumber\n", b"oom_kill") is None


def test_limits() -> None:
    assert parse_limit_bytes(b"max\n") is None
    assert parse_limit_bytes(b"9223372036854771712\n") is None  # v1 "unlimited"
    assert parse_limit_bytes(b"268435456\n") == 256 << 20
    assert parse_limit_bytes(b"garbage") is None


def test_a_file_larger_than_the_guess_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "memory.stat"
    path.write_bytes(V1_STAT * 20)
    cgroup_file = CgroupFile(str(path), size_bytes=64)
    assert cgroup_file.read() == V1_STAT * 20
    path.write_bytes(b"rss 5\n")  # re-read in place sees new content
    assert cgroup_file.read() == b"rss 5\n"
    cgroup_file.close()


def test_a_missing_file_is_a_gone_cgroup(tmp_path: Path) -> None:
    with pytest.raises(CgroupGone):
        CgroupFile(str(tmp_path / "gone" / "memory.events")).read()
