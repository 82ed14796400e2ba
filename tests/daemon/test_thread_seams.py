"""Thread ownership is a fact of the types: what the loop holds leads to no object a worker
owns, and what the workers and the HTTP server are given leads to nothing of the loop's.

Each side's objects are found by following attributes (support.ownership); the agent runs
for real on a fake node with a probe directory, so every worker is started as in `run`, and
the Kubernetes side's four threads run against the fake API server, given what the agent
gives them."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from support import until
from support.agent import agent_thread
from support.fakeapi import NODE, FakeApiServer
from support.host import config_for, fake_host
from support.ownership import paths_to

from oomwatch.cgroups import CgroupWatcher, TimelineSampler
from oomwatch.cgroups.timeline_snapshot import SnapshotMaker
from oomwatch.daemon import cgroup_worker, wiring
from oomwatch.daemon.agent import Agent
from oomwatch.daemon.cgroup_thread import CgroupThread
from oomwatch.daemon.forecasting import ForecastWatch
from oomwatch.daemon.heartbeat import Heartbeat
from oomwatch.daemon.loop_inbox import LoopInbox
from oomwatch.daemon.pipeline import Pipeline
from oomwatch.kube import KubeIntegration
from oomwatch.kube.verifier import PodChanges
from oomwatch.kube.watcher import PodWatcher
from oomwatch.probe.reader import ProbeDirReader
from oomwatch.reconcile import ReconcileState
from oomwatch.sinks.log import get_logger
from oomwatch.sources.kernel_log import KernelLog
from oomwatch.stages import KubeLink
from oomwatch.store import IncidentStore

WORKERS_OWN: tuple[type, ...] = (
    CgroupThread,
    CgroupWatcher,
    TimelineSampler,
    SnapshotMaker,
    ForecastWatch,
)
LOOP_OWNS: tuple[type, ...] = (Agent, Pipeline, ReconcileState, KernelLog)


def test_the_loop_reaches_no_workers_objects_and_the_workers_none_of_the_loops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[CgroupThread] = []
    given: list[object] = []

    class Recorded(CgroupThread):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    def health(*args: Any) -> Callable[[], bool]:
        healthy = real_health(*args)
        given.append(healthy)
        return healthy

    def connect_kube(config: Any, submit: Any, kernel_kills_for: Any, log: Any) -> KubeLink | None:
        given.extend([submit, kernel_kills_for])
        return None  # standalone from here on

    real_health = wiring.health
    monkeypatch.setattr(cgroup_worker, "CgroupThread", Recorded)
    monkeypatch.setattr(wiring, "health", health)
    monkeypatch.setattr(wiring, "connect_kube", connect_kube)
    _, writer, _ = fake_host(tmp_path)
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    config = config_for(tmp_path, probe_dir=probe_dir, standalone=False)
    try:
        with agent_thread(config) as agent:
            until("the loop's first turn", lambda: agent.metrics_address, 10.0, 0.02)
            assert agent.cgroups.is_alive() and len(made) == 1 and len(given) == 3
            for kind in (*WORKERS_OWN, ProbeDirReader):
                assert paths_to(agent, kind) == [], kind.__name__
            for loop_kind in LOOP_OWNS:
                assert paths_to(made[0], loop_kind) == [], loop_kind  # the cgroup worker's
                assert paths_to(given, loop_kind) == [], loop_kind  # Kubernetes', HTTP's
    finally:
        os.close(writer)


def test_a_worker_never_started_closes_what_it_made_at_stop(tmp_path: Path) -> None:
    """Until `start()` the loop's side is the only holder of the worker's objects."""
    (tmp_path / "cgroup").mkdir()
    closed: list[str] = []

    class Watcher(CgroupWatcher):
        def close(self) -> None:
            closed.append("watcher")
            super().close()

    worker = cgroup_worker.CgroupWorker(
        lambda: Watcher([str(tmp_path / "cgroup")]),
        TimelineSampler(1.0, 60.0),
        on_samples=lambda samples, now, view: None,
        wake=lambda: None,
        log=get_logger(),
    )
    assert paths_to(worker, CgroupWatcher) != []  # not started: still held here
    worker.stop()
    assert closed == ["watcher"] and paths_to(worker, CgroupWatcher) == []


def test_the_heartbeat_is_read_as_one_value() -> None:
    now = [10.0]
    heartbeat = Heartbeat(clock=lambda: now[0], run_delay=lambda tid: 1.0)
    heartbeat.beat()
    with pytest.raises(dataclasses.FrozenInstanceError):
        heartbeat._beat.at_s = 0.0  # type: ignore[misc]
    now[0] = 12.0
    assert heartbeat.stale_s() == 2.0


def test_the_kube_threads_are_given_their_own_objects_and_nothing_of_the_loops(
    tmp_path: Path,
) -> None:
    """Each thread gets its object and the stop event, never the `KubeIntegration` the loop
    holds; only the pod watch's thread reaches the watcher and the seen-set it keeps; what
    the loop reads of them (connected, synced, reachable, available) is a published Event."""
    api = FakeApiServer().start()
    inbox, store = LoopInbox(), IncidentStore(tmp_path / "state")
    kube: KubeIntegration | None = None
    try:
        with client.ApiClient(client.Configuration(host=api.url)) as api_client:
            kube = KubeIntegration(
                NODE,
                annotate=True,
                submit=inbox.submit,
                kernel_kills_for=store.kills_in,
                api_client=api_client,
            )
            kube.start()
            until("the pods listed", lambda: kube.cache.synced or None, 10.0, 0.02)
            threads = {
                t.name: t for t in threading.enumerate() if t.name.startswith("oomwatch-kube")
            }
            assert sorted(threads) == [
                "oomwatch-kube-events",
                "oomwatch-kube-incidents",
                "oomwatch-kube-pods",
                "oomwatch-kube-verify",
            ]
            for name, thread in threads.items():
                for loop_kind in (KubeIntegration, *LOOP_OWNS):
                    assert paths_to(thread, loop_kind) == [], (name, loop_kind)
                if name == "oomwatch-kube-pods":  # the walk does reach through a thread
                    assert paths_to(thread, PodChanges) == ["root._target.__self__._on_change"]
                else:
                    assert paths_to(thread, PodWatcher) == [], name
                    assert paths_to(thread, PodChanges) == [], name
            published = (kube._watcher.watching, kube.cache._synced, kube.publisher._reachable)
            assert all(isinstance(flag, threading.Event) for flag in published)
            assert kube.incidents is not None
            assert isinstance(kube.incidents._available, threading.Event)
    finally:
        if kube is not None:
            kube.stop(timeout_s=1.0)
        api.stop()
        inbox.close()
