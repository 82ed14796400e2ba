"""Distributed training: the probe records the rank, the world size and the launch;
the ranks of one launch that run out together are one incident naming the first to run out
and its device.  The slow test runs torchrun with two CPU ranks (gloo): rank 1 raises torch's
OOM, torchrun SIGTERMs rank 0, as it does on a GPU (shared/notes/verified-here.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.clock import FakeClock
from support.contract import validate_stored

from oomwatch.diagnosis import diagnose
from oomwatch.probe.framework import JOB_WINDOW_S, FrameworkOomSource
from oomwatch.probe.probe import Probe, distributed_identity
from oomwatch.probe.schema import FrameworkOomEvent
from oomwatch.store import IncidentStore

from .agent import REPO

POD_UID = "5f0c2a9e-1d7b-4c1e-9a53-6b1f0e2d7c44"


def test_the_launch_comes_from_torchruns_environment() -> None:
    env = {
        "RANK": "1",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "2",
        "TORCHELASTIC_RUN_ID": "abc",
        "TORCHELASTIC_RESTART_COUNT": "2",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    want = {
        "rank": 1,
        "local_rank": 1,
        "world_size": 2,
        "job_id": "abc/2",
        "visible_devices": "0,1",
    }
    assert distributed_identity(env.get) == want
    kubeflow = {
        "RANK": "0",
        "WORLD_SIZE": "4",
        "MASTER_ADDR": "job-master-0",
        "MASTER_PORT": "23456",
    }
    assert distributed_identity(kubeflow.get)["job_id"] == "job-master-0:23456/0"
    assert distributed_identity({"RANK": "x", "WORLD_SIZE": "2"}.get) == {}
    nothing: dict[str, str] = {}
    assert distributed_identity(nothing.get) == {}


def _rank(probe_dir: Path, rank: int, mono_s: float, job: str = "run-1/0") -> None:
    identity = {"rank": rank, "local_rank": rank, "world_size": 2, "job_id": job}
    probe = Probe(probe_dir, pod_uid=POD_UID, container="trainer", distributed=identity)
    message = (
        f"CUDA out of memory. Tried to allocate 1024.00 GiB. GPU {rank} has a total"
        " capacity of 79.18 GiB of which 78.60 GiB is free."
    )
    probe._write_event(
        FrameworkOomEvent(
            wall_s=1.7e9 + mono_s,
            mono_s=mono_s,
            framework="torch-cuda",
            message=message,
            device=f"cuda:{rank}",
            requested_bytes=1 << 40,
            total_bytes=85_018_755_072,
        )
    )
    probe.stop()


def test_ranks_that_run_out_together_are_one_incident(tmp_path: Path) -> None:
    probe_dir, clock = tmp_path / "probe", FakeClock()
    _rank(probe_dir, 0, mono_s=500.4)
    _rank(probe_dir, 1, mono_s=500.1)  # rank 1 ran out first
    _rank(probe_dir, 1, mono_s=900.0, job="run-1/1")  # the restarted launch: its own
    # each rank its own file (and socket) in one container; the restarted rank 1 renamed its own
    assert sorted(p.name for p in probe_dir.glob("*.ring")) == [
        f"{POD_UID}.trainer.r0.ring",
        f"{POD_UID}.trainer.r1.prev.ring",
        f"{POD_UID}.trainer.r1.ring",
    ]
    source = FrameworkOomSource(probe_dir, clock=clock)
    assert source.poll() == []  # held for the window
    clock.now += JOB_WINDOW_S
    incidents = sorted(source.poll(), key=lambda i: i.kernel_time_s or 0)
    assert len(incidents) == 2 and source.poll() == []
    first = diagnose(incidents[0])
    alloc = first.allocator or {}
    assert (alloc["rank"], alloc["device"], alloc["world_size"]) == (1, "cuda:1", 2)
    assert [(r["rank"], r["device"], r["after_s"]) for r in alloc["ranks"]] == [
        (1, "cuda:1", 0.0),
        (0, "cuda:0", 0.3),
    ]
    assert "on cuda:1 as rank 1 of 2" in (first.verdict or "")
    assert "the first of 2 ranks to run out" in first.findings[0].message
    validate_stored(first.to_dict())  # the JSON contract holds the new fields
    # a restarted agent regroups the same OOMs into the same incident: the store keeps one
    store = IncidentStore(tmp_path / "state")
    assert sum(store.add(i) for i in incidents) == 2
    again = FrameworkOomSource(probe_dir, clock=clock)
    again.poll()
    clock.now += JOB_WINDOW_S
    assert sum(store.add(i) for i in again.poll()) == 0
    store.close()


TRAINER = """
import os, time, torch, torch.distributed as dist, oomwatch.probe
probe = oomwatch.probe.start()
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    raise torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total capacity of 79.18 GiB"
        " of which 18.15 GiB is free. Process 439 has 40.51 GiB memory in use. Including"
        " non-PyTorch memory, this process has 20.51 GiB memory in use. Of the allocated memory"
        " 20.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.")
time.sleep(60)  # rank 0: torchrun's SIGTERM ends it
"""


@pytest.mark.slow  # torchrun and two ranks importing torch: ~10 s
def test_torchrun_two_ranks_one_runs_out(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    probe_dir = tmp_path / "probe"
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    env = {
        "OOMWATCH_PROBE_DIR": str(probe_dir),
        "OOMWATCH_POD_UID": POD_UID,
        "OOMWATCH_POD_NAMESPACE": "ml",
        "OOMWATCH_POD_NAME": "trainer-0",
        "OOMWATCH_CONTAINER_NAME": "trainer",
        "PYTHONPATH": str(REPO),
        "PATH": "/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "0",
            str(script),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0 and "OutOfMemoryError" in run.stderr, run.stderr[-2000:]
    clock = FakeClock()
    source = FrameworkOomSource(probe_dir, clock=clock)
    source.poll()
    clock.now += JOB_WINDOW_S
    [incident] = source.poll()
    incident = diagnose(incident)
    alloc = incident.allocator or {}
    assert (alloc["rank"], alloc["world_size"], alloc["device"]) == (1, 2, "cuda:0")
    assert alloc["job_id"] and alloc["job_id"].endswith("/0")
    assert [r["rank"] for r in alloc["ranks"]] == [1]  # rank 0 saw a SIGTERM, not an OOM
    assert incident.verdict_code == "device-shared"
