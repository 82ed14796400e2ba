"""One incident per framework OOM however often the writer restarts.

A container restarted in its pod keeps its pod UID and container name, so its probe writes
the same `<pod uid>.<container>.ring` and renames the previous run's file to `.prev.ring`;
an event read again under that name, or again after the agent restarts, is the same event.
Real processes write the files (a stand-in `torch` module raises the OOM: what is tested is
the bookkeeping, not torch, and five torch imports would cost seconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oomwatch.incident import Incident
from oomwatch.probe.framework import FrameworkOomSource
from oomwatch.probe.probe import Probe
from oomwatch.probe.schema import FrameworkOomEvent
from oomwatch.store import IncidentStore

from .agent import REPO

WRITER = """
import sys, types
torch = types.ModuleType("torch")
class OutOfMemoryError(RuntimeError):
    pass
torch.OutOfMemoryError = OutOfMemoryError
torch.cuda = types.SimpleNamespace(is_available=lambda: False, is_initialized=lambda: False)
sys.modules["torch"] = torch
import oomwatch.probe
probe = oomwatch.probe.start()
probe.set_phase("train", step=int(sys.argv[1]))
raise torch.OutOfMemoryError(
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB of "
    "which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.05 GiB memory in "
    "use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 7.50 GiB is reserved "
    "by PyTorch but unallocated.")
"""
POD_UID = "5f0c2a9e-1d7b-4c1e-9a53-6b1f0e2d7c44"


def _run_writer(probe_dir: Path, step: int) -> None:
    env = {
        "OOMWATCH_PROBE_DIR": str(probe_dir),
        "OOMWATCH_POD_UID": POD_UID,
        "OOMWATCH_POD_NAME": "trainer-0",
        "OOMWATCH_POD_NAMESPACE": "ml",
        "OOMWATCH_CONTAINER_NAME": "trainer",
        "PYTHONPATH": str(REPO),
        "PATH": "/usr/bin:/bin",
    }
    run = subprocess.run(
        [sys.executable, "-c", WRITER, str(step)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and "OutOfMemoryError" in run.stderr, run.stderr


def _store_all(store: IncidentStore, incidents: list[Incident]) -> int:
    return sum(store.add(i) for i in incidents)


@pytest.mark.slow  # six Python processes: ~5 s
def test_five_restarts_in_one_identity_are_five_incidents(tmp_path: Path) -> None:
    probe_dir, state = tmp_path / "probe", tmp_path / "state"
    probe_dir.mkdir()
    store, source = IncidentStore(state), FrameworkOomSource(probe_dir)
    added = []
    for step in range(5):
        _run_writer(probe_dir, step)
        added.append(_store_all(store, source.poll()))
        if step == 2:  # the agent restarts: a new source, the store reopened
            source.close()
            store.close()
            store, source = IncidentStore(state), FrameworkOomSource(probe_dir)
            added.append(_store_all(store, source.poll()))
    # Each run's OOM once when it happens; the restarted agent's first poll adds nothing.
    assert added == [1, 1, 1, 0, 1, 1]
    assert sorted(p.name for p in probe_dir.glob("*.ring")) == [
        f"{POD_UID}.trainer.prev.ring",
        f"{POD_UID}.trainer.ring",
    ]
    stored = [i for i in store.query() if i.kind == "framework"]
    store.close()
    source.close()
    assert len(stored) == 5
    steps = sorted((i.allocator or {})["step"] for i in stored)
    assert steps == [0, 1, 2, 3, 4]  # one per run, none twice
    assert len({(i.allocator or {})["pid"] for i in stored}) == 5


def test_the_same_file_read_by_a_fresh_source_is_not_new(tmp_path: Path) -> None:
    """A restarted agent reads every file again: the store knows each event by its writer."""
    probe_dir, state = tmp_path / "probe", tmp_path / "state"
    probe_dir.mkdir()
    _run_writer(probe_dir, 7)
    store = IncidentStore(state)
    first = FrameworkOomSource(probe_dir).poll()
    again = FrameworkOomSource(probe_dir).poll()
    assert len(first) == len(again) == 1
    assert _store_all(store, first) == 1 and _store_all(store, again) == 0
    store.close()


def test_a_renamed_file_keeps_its_events_known(tmp_path: Path) -> None:
    """Three probes of one identity in turn (in this process: each a new start time): the
    second renames the first's file to `.prev.ring`, the third the second's; 3 incidents."""
    probe_dir, state = tmp_path / "probe", tmp_path / "state"
    store, source = IncidentStore(state), FrameworkOomSource(probe_dir)
    added = []
    for step in range(3):
        probe = Probe(probe_dir, pod_uid=POD_UID, container="trainer")
        probe._write_event(
            FrameworkOomEvent(
                wall_s=1.0e9 + step,
                mono_s=100.0 + step,
                framework="torch-cuda",
                message="CUDA out of memory",
                step=step,
            )
        )
        probe.stop()
        added.append(_store_all(store, source.poll()))
    assert added == [1, 1, 1]
    assert len(store.query()) == 3
    store.close()
