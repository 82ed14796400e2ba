"""What a pod can do to the probe walk's work and to the agent's log: little.  A crowded
pod directory is listed only as far as POD_DIR_ENTRIES; junk files touched every second make
a few refusal lines and one summary, so the agent's own kill lines stay in `kubectl logs`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from support.clock import FakeClock
from support.probe_records import EntryCount, write_record

from oomwatch.probe.reader import POD_DIR_ENTRIES, REFUSAL_LINES, ProbeDirReader

POD = "1b2c0000-{:04d}"


def test_crowded_pod_directories_do_not_lengthen_the_walk(
    probe_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    junk = probe_dir / "junk"
    junk.write_bytes(b"x")
    for d in range(10):
        pod = probe_dir / POD.format(d)
        pod.mkdir()
        for i in range(POD_DIR_ENTRIES + 200):  # hard links: a pod needs no space for this
            os.link(junk, pod / f"j{i}")
    real = probe_dir / POD.format(99)
    real.mkdir()
    write_record(real)
    count = EntryCount().install(monkeypatch)
    records = ProbeDirReader(probe_dir, clock=FakeClock()).read_all()  # no deadline: counts
    assert [r.pod_dir for r in records] == [POD.format(99)]
    # the top level's 12 entries, POD_DIR_ENTRIES of each pod's: not every entry of every
    # directory (the walk's time is `bench/probe_reader.py --crowded-pod-dirs 10`)
    assert count.looked <= 12 + 11 * POD_DIR_ENTRIES, count.looked


def test_hundreds_of_junk_files_make_a_few_lines_and_one_summary(
    probe_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(300):
        (probe_dir / f"junk{i}.trainer.ring").write_bytes(b"\0" * 64)
    reader = ProbeDirReader(probe_dir)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            reader.read_all()
            for i in range(300):  # touched: a new version of every one
                os.utime(probe_dir / f"junk{i}.trainer.ring")
    ours = [r for r in caplog.records if r.name == "oomwatch.probe.reader"]
    lines = [r for r in ours if r.getMessage() == "probe_file_refused"]
    summaries = [r for r in ours if r.getMessage() == "probe_files_refused"]
    assert len(lines) <= REFUSAL_LINES + 3  # + "read in turns"
    assert len(summaries) == 1 and summaries[0].__dict__["files"] >= 100


def test_every_rank_of_an_eight_gpu_pod_is_read_with_its_previous_run(probe_dir: Path) -> None:
    pod = probe_dir / POD.format(7)
    pod.mkdir()
    names = {
        f"{pod.name}/1b2c-44.{container}.r{rank}{prev}.ring"
        for container in ("trainer", "eval")
        for rank in range(8)
        for prev in ("", ".prev")
    }
    for name in names:
        write_record(probe_dir, name)
    assert {r.name for r in ProbeDirReader(probe_dir).read_all()} == names
