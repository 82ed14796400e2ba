"""100 one-event probe files under 100 owner uids cannot drain the budget a real trainer's
OOM needs, nor get it dropped and marked seen forever: vouched sources
(per-pod directories) have a budget of their own, and a refused event waits in its file to be
recorded once its source has tokens, counted and summarised meanwhile."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

import pytest
from support.clock import FakeClock
from support.probe_records import META

from oomwatch.probe.framework import FrameworkOomSource, RateLimit
from oomwatch.probe.reader import ProbeDirReader, ReaderLimits
from oomwatch.probe.ring import RingWriter
from oomwatch.probe.schema import FrameworkOomEvent, to_payload

TRAINER_UID = "1b2c0000-4444"
pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="chown to 100 owners needs root")


def one_event(path: Path, owner: int, pod_uid: str | None) -> None:
    meta = replace(META, pod_uid=pod_uid, cgroup=None)
    writer = RingWriter(str(path), to_payload(meta))
    writer.write_event(
        to_payload(
            FrameworkOomEvent(
                wall_s=1_700_000_005.5,
                mono_s=1005.5,
                framework="torch-cuda",
                message="CUDA out of memory.",
            )
        )
    )
    writer.close()
    os.chown(path, owner, owner)


def flood(probe_dir: Path) -> None:
    for uid in range(100):
        one_event(probe_dir / f"f{uid}.ring", 20_000 + uid, None)


def source(probe_dir: Path, clock: FakeClock, pod_dirs: bool) -> FrameworkOomSource:
    reader = ProbeDirReader(probe_dir, ReaderLimits(max_age_s=1e12))
    return FrameworkOomSource(
        probe_dir, reader=reader, pod_dirs=pod_dirs, rate=RateLimit(clock=clock)
    )


def test_the_real_trainers_oom_is_recorded_after_a_100_uid_flood(
    probe_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    flood(probe_dir)
    frameworks = source(probe_dir, clock, pod_dirs=True)
    with caplog.at_level(logging.WARNING):
        first = frameworks.poll(1_700_000_006.0)
    assert len(first) == 20  # the unvouched budget, apart from the vouched one
    (probe_dir / TRAINER_UID).mkdir()
    one_event(probe_dir / TRAINER_UID / "trainer.ring", 1000, TRAINER_UID)
    (trainer,) = frameworks.poll(1_700_000_007.0)
    assert trainer.pod_uid == TRAINER_UID
    summaries = [r for r in caplog.records if r.getMessage() == "framework_ooms_rate_limited"]
    assert len(summaries) == 1 and summaries[0].__dict__["waiting"] == 80  # one line, counted
    assert frameworks.suppressed == 80


def test_without_pod_dirs_a_refused_event_waits_and_is_recorded_later(probe_dir: Path) -> None:
    clock = FakeClock()
    flood(probe_dir)
    one_event(probe_dir / "trainer.ring", 1000, None)
    frameworks = source(probe_dir, clock, pod_dirs=False)
    recorded = {i.allocator["file"] for i in frameworks.poll(1_700_000_006.0) if i.allocator}
    for _ in range(200):  # one event per 15 s for all unvouched owners together
        clock.now += 15.0
        recorded |= {i.allocator["file"] for i in frameworks.poll() if i.allocator}
        if "trainer.ring" in recorded:
            break
    assert "trainer.ring" in recorded  # it waited in its file for its turn
    assert len(recorded) <= 101  # and each event once
