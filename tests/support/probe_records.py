"""Flight records for the probe tests, written by the real writer: `META` (the trainer it
describes), `sample(i)`, `write_record`, `refusals` (what the reader refused, and why) and
`EntryCount` (directory entries a walk looked at: its work, counted where time would vary)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from oomwatch.probe.ring import RingGeometry, RingWriter
from oomwatch.probe.schema import ProbeMeta, ProbeSample, to_payload

META = ProbeMeta(
    pid=4242,
    comm="python3",
    started_wall_s=1_700_000_000.0,
    started_mono_s=1000.0,
    boot_id="b0",
    cgroup="/kubepods/burstable/pod1b2c-44/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    pod_uid="1b2c-44",
    pod_name="trainer-0",
    namespace="ml",
    container="trainer",
)


def sample(i: int, *, phase: str = "train", rss_mib: int = 100) -> ProbeSample:
    """Sample i, one second apart from 1001 s (monotonic) / 1_700_000_001 s (wall)."""
    return ProbeSample(
        wall_s=1_700_000_000.0 + 1 + i,
        mono_s=1000.0 + 1 + i,
        rss_bytes=rss_mib << 20,
        uss_bytes=(rss_mib - 10) << 20,
        anon_bytes=(rss_mib - 20) << 20,
        phase=phase,
        epoch=0,
        step=i,
        batch_size=64,
    )


def write_record(
    directory: Path,
    name: str = "1b2c-44.trainer.ring",
    meta: ProbeMeta = META,
    samples: list[ProbeSample] | None = None,
    geometry: RingGeometry | None = None,
) -> Path:
    path = directory / name
    writer = RingWriter(str(path), to_payload(meta), geometry)
    for s in samples if samples is not None else [sample(i) for i in range(5)]:
        writer.write_sample(to_payload(s))
    writer.close()
    return path


def refusals(caplog: pytest.LogCaptureFixture, event: str = "probe_file_refused") -> dict[str, str]:
    """File name -> reason of the reader's `probe_file_refused` (or `event`) records."""
    return {
        str(getattr(rec, "file_name", "")): str(getattr(rec, "reason", ""))
        for rec in caplog.records
        if rec.name == "oomwatch.probe.reader" and rec.getMessage() == event
    }


class EntryCount:
    """Counts the directory entries `os.scandir` yields while installed (`install`): what a
    walk of the probe directory looked at, a figure no load on the machine changes."""

    def __init__(self) -> None:
        self.looked = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> EntryCount:
        scandir = os.scandir
        count = self

        class Counted:
            def __init__(self, fd: int) -> None:
                self._it = scandir(fd)

            def __enter__(self) -> Iterator[os.DirEntry[str]]:
                for entry in self._it:
                    count.looked += 1
                    yield entry

            def __exit__(self, *exc: object) -> None:
                self._it.close()

        monkeypatch.setattr(os, "scandir", Counted)
        return self

    def take(self) -> int:
        """The entries looked at since the last `take`."""
        looked, self.looked = self.looked, 0
        return looked
