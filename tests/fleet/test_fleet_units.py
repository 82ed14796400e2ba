"""The fleet view's pure parts: Events of older agents (no summary), workload names from pod
names, trends, buckets and the Prometheus reply."""

from __future__ import annotations

import argparse

import pytest

from oomwatch.fleet.events import parse_event
from oomwatch.fleet.plugin import parse_since
from oomwatch.fleet.prom import PrometheusError, bucket_ends, kills_expr, parse_matrix, step_s
from oomwatch.fleet.top import build, guess_workload, sparkline, trend_word

OLD_AGENT_EVENT = {
    "metadata": {"name": "web-1.abc", "namespace": "shop"},
    "involvedObject": {
        "kind": "Pod",
        "namespace": "shop",
        "name": "web-7d4b9c8f6d-x2x9z",
        "fieldPath": "spec.containers{app}",
    },
    "reason": "PodLimitOOMKill",
    "message": "OOM killer killed python ...",
    "eventTime": "2026-11-23T10:00:00.000000Z",
    "series": {"count": 4, "lastObservedTime": "2026-11-23T10:20:00.000000Z"},
    "reportingComponent": "oomwatch.io/agent",
    "reportingInstance": "oomwatch-node-c",
}


def test_an_event_without_summary_still_says_who_where_and_how_often() -> None:
    seen = parse_event(OLD_AGENT_EVENT)
    assert seen is not None
    assert (seen.namespace, seen.pod, seen.node, seen.container) == (
        "shop",
        "web-7d4b9c8f6d-x2x9z",
        "node-c",
        "app",
    )
    assert seen.count == 4 and seen.scope == "pod" and seen.is_kill
    assert seen.workload == "Pod/web-7d4b9c8f6d-x2x9z" and seen.findings == ()
    assert seen.last_s - seen.first_s == 1200


def test_events_of_others_are_not_ours() -> None:
    assert parse_event({**OLD_AGENT_EVENT, "reportingComponent": "kubelet"}) is None
    assert parse_event({"reportingComponent": "oomwatch.io/agent"}) is None  # no time at all


@pytest.mark.parametrize(
    ("pod", "workload"),
    [
        ("web-7d4b9c8f6d-x2x9z", "Deployment/web"),
        ("db-0", "StatefulSet/db"),
        ("etl-28391734-q7x2v", "Pod/etl-28391734-q7x2v"),  # a Job's pod: not guessed
    ],
)
def test_workload_from_a_pod_name(pod: str, workload: str) -> None:
    assert guess_workload(pod) == workload


def test_trends_and_sparklines() -> None:
    assert trend_word([0, 0, 0]) == "-" and trend_word([0, 1, 0]) == "once"
    assert trend_word([0, 0, 4]) == "new" and trend_word([1, 1, 3, 5]) == "rising"
    assert trend_word([5, 3, 1, 1]) == "falling" and trend_word([2, 2, 2, 2]) == "steady"
    assert sparkline([0, 1, 8]) == " ▁█"


def test_buckets_cover_the_window_and_events_fall_in_theirs() -> None:
    step = step_s(7 * 86400)
    ends = bucket_ends(0.0, 7 * 86400.0, step)
    assert step == 86400 and len(ends) == 7 and ends[-1] == 7 * 86400.0
    seen = parse_event(OLD_AGENT_EVENT)
    assert seen is not None
    late = [e + seen.last_s - ends[-1] + 10 for e in ends]  # the Event in the last bucket
    [row] = build([seen], None, late, step)
    assert row.kills == 4 and row.buckets == [0] * 6 + [4]


def test_prometheus_reply_and_expression() -> None:
    expr = kills_expr(3600)
    assert "unless oomwatch_oom_incidents_total offset 3600s" in expr
    assert "increase(oomwatch_oom_incidents_total[3600s])" in expr
    reply = {
        "status": "success",
        "data": {
            "result": [
                {
                    "metric": {"namespace": "shop", "pod": "a"},
                    "values": [[100, "1.9999"], [200, "3"]],
                },
                {"metric": {"namespace": "shop", "pod": "b"}, "values": [[100, "0"]]},
            ]
        },
    }
    [series] = parse_matrix(reply, [100.0, 200.0, 300.0])
    assert series.buckets == (2, 3, 0) and series.labels["pod"] == "a"
    assert series.labels["scope"] == ""
    with pytest.raises(PrometheusError, match="bad_data"):
        parse_matrix({"status": "error", "errorType": "bad_data", "error": "x"}, [1.0])


def test_since() -> None:
    assert parse_since("7d") == 7 * 86400 and parse_since("90m") == 5400
    with pytest.raises(argparse.ArgumentTypeError, match="like 7d"):
        parse_since("a week")


def test_every_kill_reason_the_agent_sends_has_a_scope() -> None:
    """The plugin's archive cannot import oomwatch.kube (it needs the Kubernetes client), so
    the reasons are literals there: they must be the agent's."""
    from oomwatch.fleet.events import _REASON_SCOPE
    from oomwatch.kube import events as kube_events

    kill_reasons = {
        kube_events.REASON_CONTAINER,
        kube_events.REASON_CHILD,
        kube_events.REASON_GROUP,
        kube_events.REASON_POD_LIMIT,
        kube_events.REASON_NODE,
    }
    assert kill_reasons <= set(_REASON_SCOPE)


def test_the_plugin_imports_without_the_agents_libraries() -> None:
    """The krew zipapp carries no dependency: the plugin's modules must import without the
    Kubernetes client, urllib3 or PyYAML (oomwatch.kube loads its client-bound names lazily)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for m in ('kubernetes', 'urllib3', 'yaml'): sys.modules[m] = None\n"
        "import oomwatch.fleet.plugin, oomwatch.fleet.report, oomwatch.report.page\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_flags_go_anywhere_after_the_command() -> None:
    from oomwatch.fleet.plugin import parser

    args = parser().parse_args(
        [
            "report",
            "-o",
            "wide",
            "deploy/web",
            "--context",
            "prod",
            "-n",
            "shop",
            "--kubeconfig",
            "k",
        ]
    )
    assert (args.target, args.output, args.namespace) == ("deploy/web", "wide", "shop")
    assert (args.context, args.kubeconfig) == ("prod", "k")
    args = parser().parse_args(["--context", "dev", "top", "-A"])
    assert args.context == "dev" and args.all_namespaces
