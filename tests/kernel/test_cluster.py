"""The agent with a cluster on a real cgroup v2 kernel: a memory.oom.group kill (what kubelet
>= 1.28 sets on v2 for every container) becomes one GroupOOMKill Event on the pod, through
the fake API server -- the v2 twin of tests/kube/test_kube_e2e_kernel.py."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import settled
from support.agent import E2E_NODE as NODE
from support.agent import AgentProcess, connected_agent, started_and_watching
from support.fakeapi import FakeApiServer, make_pod, running_status
from support.store import STORE_QUIET_S

from oomwatch.lab import ScratchMemcg, kubelet_layout, spawn_hog, wait_rate_limit_window

pytestmark = pytest.mark.kernel
MIB = 1 << 20


@pytest.fixture
def cluster(tmp_path: Path, memcg_v2: None) -> Iterator[tuple[FakeApiServer, AgentProcess]]:
    # No cursor: the agent first decodes the whole ring (earlier tests' bursts, for tens of
    # seconds under emulation).  Header-less kills of that backlog still waiting when ours
    # is counted must not be placed in our pod: they were read before our counter was last
    # seen unchanged, so our rise is not theirs.
    api = FakeApiServer().start()
    agent = connected_agent(tmp_path, api.url, [])
    try:
        yield api, agent
    finally:
        agent.stop()
        api.stop()


def kills_told(agent: AgentProcess, events: list[dict[str, Any]]) -> str:
    """The Events and every kill the agent logged: which incident made the extra Event."""
    keys = (
        "kernel_time_s",
        "process.pid",
        "task_memcg",
        "group_kill",
        "victim_pids",
        "header_suppressed",
        "kmsg_missing",
        "attribution",
        "attribution_method",
    )
    rows = [repr({k: e.get(k) for k in ("reason", "note", "eventTime")}) for e in events]
    for _, line in agent.events(lambda e: e.get("event") == "oom_kill"):
        rows.append(repr({k: line.get(k) for k in keys}))
    return "\n".join(rows)


def test_group_kill_is_one_group_event_on_the_pod(
    cluster: tuple[FakeApiServer, AgentProcess], scratch_v2: ScratchMemcg
) -> None:
    api, agent = cluster
    pod_uid, container_id = str(uuid.uuid4()), uuid.uuid4().hex * 2
    api.put_pod(
        make_pod(
            "web-0",
            "shop",
            uid=pod_uid,
            node=NODE,
            owner=("StatefulSet", "web"),
            labels={},
            statuses=[running_status(container_id)],
        )
    )
    container = kubelet_layout(
        scratch_v2, pod_uid, container_id, driver="systemd", container_limit_bytes=64 * MIB
    )
    container.set_oom_group()
    peer = spawn_hog(container, "idle", mb=4, comm="v2-sidekick")
    assert peer.wait_for("holding", timeout_s=60) == "holding"
    started = started_and_watching(agent, api, timeout_s=120)
    assert started["standalone"] is False and started["cgroup_versions"] == [2]

    wait_rate_limit_window()
    hog = spawn_hog(container, mode="anon", mb=200, comm="v2-web")
    assert hog.wait(60) == -signal.SIGKILL and peer.wait(10) == -signal.SIGKILL

    def ours(a: FakeApiServer) -> list[dict[str, Any]]:
        return [e for e in a.events.values() if e["regarding"].get("uid") == pod_uid]

    [event] = api.wait_for(ours, timeout_s=60)
    assert event["reason"] == "GroupOOMKill"
    assert event["regarding"]["fieldPath"] == "spec.containers{app}"
    _, line = agent.wait_line(lambda ln: ln.get("k8s.pod.name") == "web-0", timeout_s=20)
    assert (line["k8s.namespace.name"], line["k8s.container.name"], line["group_kill"]) == (
        "shop",
        "app",
        True,
    )
    assert set(line["victim_pids"]) == {hog.pid, peer.pid}
    # the pod's Events idle past the reconciliation grace: the primary's second count (the
    # group kill counts it twice) would have made its own Event by then
    reasons = settled(
        "the pod's Events", lambda: [e["reason"] for e in ours(api)], STORE_QUIET_S, 60
    )
    assert reasons == ["GroupOOMKill"], kills_told(agent, ours(api))
