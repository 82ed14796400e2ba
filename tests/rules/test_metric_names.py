"""Every metric the rules and the dashboard name is one the agent really exports.

A real `oomwatch run --standalone` runs as a subprocess, fed one kernel OOM report through a
FIFO (as the DaemonSet's kmsg relay feeds it) over a fake cgroup v2 tree
(tests/support/fifo_agent.py), so its kill counters and memory gauges exist;
its `/metrics` is scraped over HTTP as Prometheus would.  The label sets of the series one
report cannot create (group kills, framework OOMs) are checked on the metrics sink itself.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import wait_for
from support.fifo_agent import REPO, running_agent

from oomwatch.incident import Finding, Incident, PodContext, Victim
from oomwatch.sinks.metrics import Metrics, SeriesLabels

from .promql import (
    KUBE_STATE_METRICS,
    assert_all_exported,
    dashboard_expressions,
    exported_names,
    kube_state_metrics_misuse,
    load_dashboard,
    metric_names,
    recording_names,
    referenced_names,
    rule_expressions,
    rules,
    selector_labels,
)

UID = "5d1c7a52-8d8e-4a53-9d0b-2f4c1d3e5a60"
POD = PodContext(namespace="shop", pod="cart-0", container="api")
# The label sets the rules and their templates rely on (the agreed metric contract).
IDENTITY = {"namespace", "pod", "container", "pod_uid", "workload", "workload_type"}
CONTRACT_LABELS = {
    "oomwatch_oom_kills_total": IDENTITY | {"kind", "scope", "attribution"},
    "oomwatch_oom_incidents_total": IDENTITY | {"kind", "scope", "attribution"},
    "oomwatch_group_oom_kills_total": IDENTITY,
    "oomwatch_child_process_oom_kills_total": IDENTITY,
    "oomwatch_oom_findings_total": IDENTITY | {"finding"},
    "oomwatch_framework_oom_total": IDENTITY | {"framework"},
    "oomwatch_kmsg_records_lost_total": set(),
    "oomwatch_oom_reports_suppressed_total": set(),
    "oomwatch_last_oom_kill_timestamp_seconds": set(),
    "oomwatch_container_memory_usage_bytes": IDENTITY,
    "oomwatch_container_memory_working_set_bytes": IDENTITY,
    "oomwatch_container_memory_limit_bytes": IDENTITY,
    "oomwatch_build_info": {"version"},
}


# One report cannot make these: no group kill in it, and no probe for framework OOMs.
NOT_FROM_ONE_REPORT = {"oomwatch_group_oom_kills_total", "oomwatch_framework_oom_total"}


@pytest.fixture
def served_metrics() -> Iterator[tuple[Metrics, str]]:
    metrics = Metrics()
    host, port = metrics.serve("127.0.0.1", 0, lambda: True)
    try:
        yield metrics, f"http://{host}:{port}/metrics"
    finally:
        metrics.close()


@pytest.fixture
def agent_scrape(tmp_path: Path) -> Iterator[str]:
    """`/metrics` of a real `oomwatch run` after it has seen one OOM kill."""
    args = ("--sample-interval-s", "0.2", "--enrich-wait-s", "1")
    with running_agent(REPO, tmp_path, *args) as agent:
        agent.kill()
        counted = wait_for(lambda: "oomwatch_oom_incidents_total{" in agent.get("/metrics")[1], 15)
        assert counted, f"no oomwatch_oom_incidents_total within 15 s; {agent.why()}"
        yield agent.metrics()


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text: str = resp.read().decode()
        return text


def _kill(**fields: object) -> Incident:
    incident = Incident(
        kind="memcg",
        limit_scope="container",
        pod_uid=UID,
        k8s=POD,
        wall_time="2026-11-22T08:00:00+00:00",
        victims=[Victim(pid=4242, comm="python3")],
    )
    for name, value in fields.items():
        setattr(incident, name, value)
    return incident


def test_metric_name_extraction_on_tricky_expressions() -> None:
    expr = (
        'sum without (kind, scope) (rec:a:increase5m{pod_uid!=""}) >= 3 '
        "or (b_total unless b_total offset 5m) or increase(c_total[30m]) "
        'and on (instance) label_replace(d > 0, "reason", "x_total", "", "") '
        '/ ignoring(job) group_left(pod) topk(5, e{namespace=~"$namespace"}) * 1e3 '
        "+ sum_over_time(f[$__range:5m]) or vector(0) + time() - g"
    )
    assert metric_names(expr) == {"rec:a:increase5m", "b_total", "c_total", "d", "e", "f", "g"}
    assert dict(selector_labels('x{a="1", b=~"q{}", c!=""} + y{}')) == {
        "x": {"a", "b", "c"},
        "y": set(),
    }


def test_rules_and_dashboard_name_only_exported_metrics(agent_scrape: str) -> None:
    exported = exported_names(agent_scrape)
    for name, labels in CONTRACT_LABELS.items():
        assert name in exported, f"agent does not export {name}"
        if name not in NOT_FROM_ONE_REPORT:
            assert exported[name] == labels, f"{name} labels {exported[name]} != {labels}"
    assert_all_exported(exported)


def test_every_incident_kind_exports_the_contract_labels(
    served_metrics: tuple[Metrics, str],
) -> None:
    metrics, url = served_metrics
    metrics.emit(_kill(findings=[Finding("limit-container", "info", "x")]))
    metrics.emit(_kill(kind="global", limit_scope="global"))
    metrics.emit(_kill(group_kill=True, group_cgroup="/kubepods/burstable/pod" + UID))
    metrics.emit(_kill(container_survived=True))
    metrics.emit(_kill(header_suppressed=True))
    metrics.emit(_kill(kind="framework", victims=[], allocator={"framework": "torch-cuda"}))
    metrics.add_kmsg_lost(2)
    metrics.set_container_memory(SeriesLabels("shop", "cart-0", "api", UID), 900, 1000)

    exported = exported_names(_scrape(url))

    assert {name: exported.get(name) for name in CONTRACT_LABELS} == CONTRACT_LABELS


def test_every_recording_rule_is_used_and_every_named_one_exists() -> None:
    used = {
        name
        for expr in rule_expressions() + dashboard_expressions(load_dashboard())
        for name in metric_names(expr)
    }
    assert recording_names() <= used, f"unused recording rules {recording_names() - used}"
    named = {name for name in referenced_names() if ":" in name}
    assert named <= recording_names(), f"no such recording rule: {named - recording_names()}"


def test_kube_state_metrics_series_only_in_the_agent_down_alert() -> None:
    """The exemption for names the agent does not export is narrow, and not stale."""
    for name, allowed in KUBE_STATE_METRICS.items():
        users = {
            rule.get("alert")
            for rule in rules()
            if name in " ".join([rule["expr"], *rule.get("annotations", {}).values()])
        }
        assert users == allowed, (name, users)
    assert kube_state_metrics_misuse() == {}
