"""A real Prometheus fires OOMKillDetected for a real kernel OOM kill seen by `oomwatch run`.

The agent runs standalone on a free port, Prometheus scrapes it every second with the shipped
rule file, and a hog in a scratch memcg laid out like kubelet's is killed by the kernel.  The
alert must fire for that pod's UID within a bounded time.  The live agent's `/metrics` is also
checked against every name the rules and the dashboard use.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from support import until
from support.agent import AgentProcess
from support.prometheus import PrometheusServer

from oomwatch.lab import ScratchMemcg, kubelet_layout, provoke_kill
from oomwatch.lab.hierarchy import Version

from .promql import (
    RULES_FILE,
    assert_all_exported,
    exported_names,
    grafana_to_promql,
    panel_queries,
)

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.host_only(
        "a Prometheus server beside the agent (minutes emulated); the lab VM runs v2's kill "
        "metric (tests/kernel/test_agent.py), and the rules read only the metric"
    ),
]

ALERT_TIMEOUT_S = 60.0
CONTAINER_LIMIT_BYTES = 64 << 20
AGENT_POD_LABELS = {"namespace": "oomwatch", "pod": "oomwatch-x7k2p", "container": "agent"}
_T = TypeVar("_T")


@pytest.fixture
def agent(cgroup_version: Version, tmp_path: Path) -> Iterator[AgentProcess]:
    """The agent on this host's cgroups (its version's case; the other one skips)."""
    with AgentProcess(
        ["--cgroup-root", "/sys/fs/cgroup"], state_dir=tmp_path / "state", ready="healthy"
    ) as running:
        yield running


@pytest.fixture
def prometheus(
    prometheus_binary: str, agent: AgentProcess, tmp_path: Path
) -> Iterator[PrometheusServer]:
    server = PrometheusServer(
        prometheus_binary,
        tmp_path,
        rule_files=[RULES_FILE],
        targets=[f"127.0.0.1:{agent.port}"],
        # What the Prometheus operator's PodMonitor adds: the *agent* pod's identity.  The
        # agent's explicit empty labels must win (honor_labels), or a kill outside any known
        # pod would be blamed on the agent.
        target_labels=AGENT_POD_LABELS,
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def _firing(server: PrometheusServer, alertname: str, pod_uid: str) -> dict[str, Any] | None:
    for alert in server.alerts():
        labels = alert["labels"]
        if (
            labels.get("alertname") == alertname
            and labels.get("pod_uid") == pod_uid
            and alert["state"] == "firing"
        ):
            return alert
    return None


def _scraping(agent: AgentProcess, prometheus: PrometheusServer) -> Callable[[], str]:
    """Wait until Prometheus scrapes the agent; return a function giving both logs."""

    def logs() -> str:
        return f"--- oomwatch ---\n{agent.why()}\n--- prometheus ---\n{prometheus.log()}"

    until(
        "Prometheus scraping the agent (up == 1)",
        lambda: prometheus.query('up{job="oomwatch"} == 1') or None,
        30.0,
        why=logs,
    )
    return logs


def test_real_kill_fires_oomkilldetected_with_the_pod_uid(
    prometheus: PrometheusServer, agent: AgentProcess, cgroup_version: Version
) -> None:
    logs = _scraping(agent, prometheus)
    pod_uid = str(uuid.uuid4())
    with ScratchMemcg(version=cgroup_version) as scratch:
        container = kubelet_layout(
            scratch, pod_uid, secrets.token_hex(32), container_limit_bytes=CONTAINER_LIMIT_BYTES
        )
        capture = provoke_kill(container, mode="anon", mb=192, comm="h7-alert-hog")
        killed_at = time.monotonic()
        assert capture.hog.returncode == -9, capture.hog.stderr_text()
        assert container.oom_kill_count() >= 1

        alert = until(
            f"OOMKillDetected firing for pod_uid {pod_uid}",
            lambda: _firing(prometheus, "OOMKillDetected", pod_uid),
            ALERT_TIMEOUT_S,
            why=logs,
        )
    latency_s = time.monotonic() - killed_at
    print(f"kill -> OOMKillDetected firing: {latency_s:.1f} s (1 s scrape and evaluation)")

    labels = alert["labels"]
    assert labels["kind"] == "memcg"
    assert labels["scope"] == "container"
    assert labels["severity"] == "warning"
    assert labels["job"] == "oomwatch"
    assert not AGENT_POD_LABELS.keys() & labels.keys(), "target labels leaked into the kill"
    annotations = alert["annotations"]
    assert annotations["summary"] == f"OOM kill in pod UID {pod_uid}"
    assert f"killed 1 process(es) in pod UID {pod_uid} in the last 5" in annotations["description"]
    assert annotations["runbook_url"].endswith("/rules/README.md#oomkilldetected")
    # The kill's series appeared at 1 (no earlier sample): the recording rule counts it whole,
    # where increase() alone would have seen nothing.
    (recorded,) = prometheus.query(
        f'container:oomwatch_oom_kills:increase5m{{pod_uid="{pod_uid}"}}'
    )
    assert float(recorded["value"][1]) == 1.0

    # The names the rules and the dashboard use are what this live agent exports, and the
    # dashboard's queries show the kill.
    assert_all_exported(exported_names(agent.metrics()))
    shown = {title: prometheus.query(grafana_to_promql(expr)) for title, expr in panel_queries()}
    assert float(shown["Kernel OOM kills"][0]["value"][1]) >= 1
    assert shown["OOM kills by namespace / pod"], "the kills panel shows no series"
    assert float(shown["Agents up"][0]["value"][1]) == 1


def test_child_worker_kill_fires_oomkillchildprocess(
    prometheus: PrometheusServer, agent: AgentProcess, cgroup_version: Version
) -> None:
    logs = _scraping(agent, prometheus)
    pod_uid = str(uuid.uuid4())
    with ScratchMemcg(version=cgroup_version) as scratch:
        container = kubelet_layout(
            scratch, pod_uid, secrets.token_hex(32), container_limit_bytes=CONTAINER_LIMIT_BYTES
        )
        # The parent stays small and alive; its child outgrows the limit and is killed.
        capture = provoke_kill(
            container, mode="child-worker", mb=192, comm="h7-worker", linger_s=5.0
        )
        assert capture.hog.poll() is None, "the container's main process must outlive the kill"
        alert = until(
            f"OOMKillChildProcess firing for pod_uid {pod_uid}",
            lambda: _firing(prometheus, "OOMKillChildProcess", pod_uid),
            ALERT_TIMEOUT_S,
            why=logs,
        )
    assert alert["labels"]["severity"] == "warning"
    assert "while its main process survived" in alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"].endswith("#oomkillchildprocess")
