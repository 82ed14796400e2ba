"""Nothing a pod does to the probe directory slows the kernel log's loop.  The
walks run on the probe worker's thread; the framework-OOM source and the allocator join read
its snapshot, and the loop's thread never lists, stats or opens a probe file."""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support import until
from support.host import config_for
from support.ownership import paths_to
from support.probe_records import META, sample, write_record

from oomwatch.daemon import wiring
from oomwatch.daemon.probe_worker import ProbeWorker
from oomwatch.incident import Incident, Victim, iso_time
from oomwatch.probe.framework import FrameworkOomSource
from oomwatch.probe.join import ProbeEnricher
from oomwatch.probe.reader import ProbeDirReader
from oomwatch.sinks.log import get_logger


def test_the_loops_thread_never_touches_the_probe_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_record(tmp_path, samples=[sample(i) for i in range(5)])
    worker = ProbeWorker(functools.partial(ProbeDirReader, tmp_path), interval_s=0.05)
    try:
        until("walk 2", lambda: worker.walks >= 2 or None, 10.0, 0.01)
        assert worker.is_alive()
        loop = threading.get_ident()
        touched: list[str] = []

        def watch(name: str) -> Any:
            real = getattr(os, name)

            def call(*args: Any, **kwargs: Any) -> Any:
                if threading.get_ident() == loop:
                    touched.append(name)
                return real(*args, **kwargs)

            return call

        for name in ("scandir", "stat", "open", "lstat"):
            monkeypatch.setattr(os, name, watch(name))
        enricher = ProbeEnricher(tmp_path, reader=worker)
        victims = [Victim(pid=999, comm="python3")]
        kill = Incident(
            kind="memcg",
            kernel_time_s=1007.4,
            boot_id="b0",
            task_memcg=META.cgroup,
            victims=victims,
        )
        assert enricher.enrich(kill) and kill.allocator is not None  # from the snapshot
        FrameworkOomSource(tmp_path, reader=worker).poll()
        assert touched == []
    finally:
        worker.close()
    assert not worker.is_alive()


def test_a_kill_waits_for_a_walk_begun_after_it(tmp_path: Path) -> None:
    """The snapshot can be a whole interval old: the trainer's last samples (the phase it died
    in) are written after it.  The join defers the kill until a walk begun after it."""
    write_record(tmp_path, samples=[sample(i) for i in range(3)])  # the trainer's file
    reader = functools.partial(ProbeDirReader, tmp_path)
    worker = ProbeWorker(reader, interval_s=3600.0)  # no walk on its own
    try:
        until("walk 1", lambda: worker.walks >= 1 or None, 10.0, 0.01)
        last = [sample(i) for i in range(4)] + [sample(4, phase="died here")]
        write_record(tmp_path, samples=last)  # its last samples, after the first walk
        killed_at_s = time.time()
        enricher = ProbeEnricher(tmp_path, reader=worker)
        victims = [Victim(pid=999, comm="python3")]
        kill = Incident(
            kind="memcg",
            kernel_time_s=1007.4,
            boot_id="b0",
            task_memcg=META.cgroup,
            victims=victims,
            detected_at=iso_time(killed_at_s),
        )
        assert enricher.enrich(kill) is False and kill.allocator is None  # a walk is asked for
        until("walk 2", lambda: worker.walks >= 2 or None, 10.0, 0.01)
        assert worker.walks == 2  # the ask woke the worker long before its interval
        assert enricher.enrich(kill) and kill.allocator is not None
        assert kill.allocator["phase"] == "died here"
    finally:
        worker.close()


def test_a_kill_no_file_of_the_last_walk_may_belong_to_is_not_deferred(tmp_path: Path) -> None:
    """A walk of a crowded directory takes its whole time cap: a kill that no trainer's file
    of the last walk matches (another container's) is passed on at once, not made to wait for
    a fresh walk."""
    write_record(tmp_path, samples=[sample(i) for i in range(3)])  # a trainer elsewhere
    worker = ProbeWorker(functools.partial(ProbeDirReader, tmp_path), interval_s=3600.0)
    try:
        until("walk 1", lambda: worker.walks >= 1 or None, 10.0, 0.01)
        kill = Incident(
            kind="memcg",
            kernel_time_s=1007.4,
            boot_id="b0",
            task_memcg="/kubepods/burstable/podother/ctr",
            victims=[Victim(pid=999, comm="hog")],
            detected_at=iso_time(time.time()),
        )
        assert ProbeEnricher(tmp_path, reader=worker).enrich(kill) and kill.allocator is None
        assert worker.walks == 1  # no walk was asked for
    finally:
        worker.close()


def test_only_the_workers_thread_holds_the_reader(tmp_path: Path) -> None:
    """The reader is made on the worker's thread and held there: the framework-OOM source
    and the allocator join, as the agent wires them, lead to no reader, and what they read
    is a frozen value."""
    write_record(tmp_path, samples=[sample(i) for i in range(3)])
    made: list[threading.Thread] = []

    def reader() -> ProbeDirReader:
        made.append(threading.current_thread())
        return ProbeDirReader(tmp_path)

    worker = ProbeWorker(reader, interval_s=3600.0)
    try:
        until("walk 1", lambda: worker.walks >= 1 or None, 10.0, 0.01)
        assert [thread.name for thread in made] == ["oomwatch-probe"]
        loop_side = [
            ProbeEnricher(tmp_path, reader=worker),
            FrameworkOomSource(tmp_path, reader=worker),
        ]
        assert paths_to(loop_side, ProbeDirReader) == []
        walk = worker.walk
        assert [record.name for record in walk.records] == [name for name in os.listdir(tmp_path)]
        with pytest.raises(dataclasses.FrozenInstanceError):
            walk.records = ()  # type: ignore[misc]
    finally:
        worker.close()
    assert not worker.is_alive()


def test_the_agents_probe_wiring_leads_to_no_reader(tmp_path: Path) -> None:
    """What the agent's loop holds of the probe (`wiring.open_probe`) reaches no reader."""
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    config = config_for(tmp_path, probe_dir=probe_dir, sample_interval_s=3600.0)
    opened = wiring.open_probe(config, get_logger())
    assert opened is not None
    try:
        assert paths_to(opened, ProbeDirReader) == []
    finally:
        for part in opened:
            part.close()
