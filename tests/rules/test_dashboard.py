"""The Grafana dashboard: the panels the issue asks for, each query valid in a real Prometheus."""

from __future__ import annotations

import re
from pathlib import Path

from support.prometheus import PrometheusServer

from .promql import (
    RULES_FILE,
    dashboard_expressions,
    dashboard_panels,
    grafana_to_promql,
    load_dashboard,
    panel_queries,
)


def test_dashboard_structure() -> None:
    dashboard = load_dashboard()
    panels = list(dashboard_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        # Every query goes to the chosen data source, none to a hard-coded one.
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_dashboard_has_the_panels_the_issue_asks_for() -> None:
    exprs = [expr for _, expr in panel_queries()]

    def some(pattern: str) -> bool:
        return any(re.search(pattern, e) for e in exprs)

    assert some(r"sum by \(namespace, pod\) \(container:oomwatch_oom_kills:increase5m")
    assert some(r"topk\(\d+, container:oomwatch_memory_working_set_over_limit:ratio")
    assert some(r"^oomwatch_container_memory_working_set_bytes\{")
    assert some(r"sum by \(finding\) .*oomwatch_oom_findings_total")
    assert some(r"sum by \(kind, scope\) \(container:oomwatch_oom_kills:increase5m")
    assert some(r"node:oomwatch_kmsg_records_lost:increase10m")
    assert some(r"node:oomwatch_oom_reports_suppressed:increase10m")
    assert some(r'up\{job="oomwatch"')


def test_variables_for_cluster_node_namespace_and_workload() -> None:
    dashboard = load_dashboard()
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names == ["datasource", "cluster", "node", "namespace", "workload"]
    for expr in [e for _, e in panel_queries()]:
        if "oomwatch_" in expr or "container:" in expr or "node:" in expr:
            assert "$cluster" in expr, expr  # every oomwatch query follows the cluster choice
        if re.search(r"oomwatch_container_memory|container:oomwatch_|oomwatch_oom_findings", expr):
            assert "$workload" in expr and "$namespace" in expr, expr


def test_kills_are_marked_on_the_memory_panels() -> None:
    dashboard = load_dashboard()
    [kills] = [a for a in dashboard["annotations"]["list"] if a.get("name") == "OOM kills"]
    memory = [
        p["id"]
        for p in dashboard_panels(dashboard)
        if "oomwatch_container_memory" in " ".join(t["expr"] for t in p.get("targets", []))
        or "working_set_over_limit" in " ".join(t["expr"] for t in p.get("targets", []))
    ]
    assert kills["enable"] and sorted(kills["filter"]["ids"]) == sorted(memory) and memory
    # a kill counter appears at its first kill: the mark must see that kill too
    assert "unless" in kills["expr"] and "offset 1m" in kills["expr"]


def test_the_kernel_count_panel_compares_like_with_like() -> None:
    """node_vmstat_oom_kill counts processes the OOM killer killed (the kernel's `oom_kill`
    event, once per victim): the same unit as oomwatch_oom_kills_total, never incidents."""
    [panel] = [
        p
        for p in dashboard_panels(load_dashboard())
        if "node_vmstat_oom_kill" in " ".join(t["expr"] for t in p.get("targets", []))
    ]
    exprs = " ".join(t["expr"] for t in panel["targets"])
    assert "oomwatch_oom_kills_total" in exprs and "oomwatch_oom_incidents_total" not in exprs
    assert "by (node)" in exprs


def test_every_dashboard_query_runs_in_prometheus(prometheus_binary: str, tmp_path: Path) -> None:
    server = PrometheusServer(prometheus_binary, tmp_path, rule_files=[RULES_FILE], targets=[])
    try:
        server.wait_ready()
        for expr in dashboard_expressions(load_dashboard()):
            server.query(grafana_to_promql(expr))  # raises with Prometheus' error if invalid
    finally:
        server.stop()
