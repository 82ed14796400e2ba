"""The Grafana dashboard: the panels the issue asks for, each query valid in a real Prometheus."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import PrometheusServer
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
    assert some(r"topk\(\d+, container:oomwatch_memory_usage_over_limit:ratio")
    assert some(r"sum by \(kind, scope\) \(container:oomwatch_oom_kills:increase5m")
    assert some(r"node:oomwatch_kmsg_records_lost:increase10m")
    assert some(r"node:oomwatch_oom_reports_suppressed:increase10m")
    assert some(r'up\{job="oomwatch"\}')


def test_every_dashboard_query_runs_in_prometheus(prometheus_binary: str, tmp_path: Path) -> None:
    server = PrometheusServer(prometheus_binary, tmp_path, rule_files=[RULES_FILE], targets=[])
    try:
        server.wait_ready()
        for expr in dashboard_expressions(load_dashboard()):
            server.query(grafana_to_promql(expr))  # raises with Prometheus' error if invalid
    finally:
        server.stop()
