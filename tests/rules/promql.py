"""What the rule file and the dashboard refer to, and whether the agent exports it.

PromQL expressions and the metric names in them, against the names a scrape of the agent's
`/metrics` yields.  The name extraction is a small lexer, not a parser: strings, label
matchers, ranges, grouping clauses and Grafana variables are removed first, and what remains is
names, functions (followed by `(`), keywords and numbers.  It is exact for the expressions we
ship; a test pins it on the tricky cases.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
RULES_FILE = REPO / "rules" / "oomwatch.rules.yaml"
RULE_TESTS_DIR = REPO / "rules" / "tests"
RULES_README = REPO / "rules" / "README.md"
DASHBOARD_FILE = REPO / "rules" / "dashboards" / "oomwatch.json"
PROMETHEUS_RULE_FILE = REPO / "daemonset" / "prometheusrule.yaml"

# Series Prometheus makes itself, not the agent.
PROMETHEUS_SYNTHETIC = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE"})
# kube-state-metrics series, each allowed in these alerts only (an agent that is missing
# cannot report itself): name -> alert names.
KUBE_STATE_METRICS = {
    "kube_daemonset_status_number_unavailable": {"OOMWatchAgentDown"},
    "kube_daemonset_status_desired_number_scheduled": {"OOMWatchAgentDown"},
}
# node_exporter series, allowed only in the dashboard panel that checks oomwatch's kill count
# against the kernel's (never in a rule: a node without node_exporter must alert the same).
NODE_EXPORTER = frozenset({"node_vmstat_oom_kill"})
# Labels Prometheus adds to every scraped series (the agent never exports them); `cluster` is
# a multi-cluster Prometheus's external label.
TARGET_LABELS = frozenset({"instance", "job", "node", "cluster"})

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VAR = re.compile(r"\$\{[^}]*\}|\$\w+")
_BRACES = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "offset", "bool", "atan2", "inf", "nan", "Inf", "NaN", "start", "end"}
)
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^{}]*)\}")
_MATCHER_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")


def metric_names(expr: str) -> set[str]:
    """Every metric (or recording-rule) name an expression selects."""
    if "__name__" in expr:
        raise ValueError(f"selects by __name__, which this check cannot follow: {expr!r}")
    text = _STRING.sub('""', expr)
    text = _GRAFANA_VAR.sub("", text)
    text = _BRACES.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names: set[str] = set()
    for match in _IDENT.finditer(text):
        name, start, end = match.group(), match.start(), match.end()
        if name in _KEYWORDS or re.match(r"\s*\(", text[end:]):
            continue  # operator keyword, or a function / aggregation call
        if start > 0 and (text[start - 1].isdigit() or text[start - 1] == "."):
            continue  # the unit of a duration (5m) or the tail of a number (1e3)
        names.add(name)
    return names


def selector_labels(expr: str) -> Iterator[tuple[str, set[str]]]:
    """(metric name, label names matched in its `{...}`) for each braced selector."""
    text = _STRING.sub('""', expr)
    for match in _SELECTOR.finditer(text):
        yield match.group(1), set(_MATCHER_NAME.findall(match.group(2)))


def load_rule_groups(path: Path = RULES_FILE) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(path.read_text())["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    return [rule for group in load_rule_groups() for rule in group["rules"]]


def recording_names() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def alert_names() -> set[str]:
    return {rule["alert"] for rule in rules() if "alert" in rule}


def rule_expressions() -> list[str]:
    return [rule["expr"] for rule in rules()]


def annotation_texts() -> list[str]:
    return [text for rule in rules() for text in rule.get("annotations", {}).values()]


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
    return dashboard


def dashboard_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # panels folded into a collapsed row


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every panel target of the shipped dashboard."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard_panels(load_dashboard())
        for target in panel.get("targets", [])
    ]


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of every panel, annotation and query variable."""
    exprs = [
        target["expr"]
        for panel in dashboard_panels(dashboard)
        for target in panel.get("targets", [])
        if target.get("expr")
    ]
    exprs += [a["expr"] for a in dashboard.get("annotations", {}).get("list", []) if a.get("expr")]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        label_values = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", text)
        exprs.append(label_values.group(1) if label_values else text)
    return exprs


def grafana_to_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced, for a real Prometheus."""
    expr = expr.replace("$__range", "1h").replace("$__rate_interval", "1m")
    expr = expr.replace("$__interval", "1m")
    return re.sub(r"\$\{?(?:cluster|node|namespace|workload)\}?", ".*", expr)


def exported_names(exposition: str) -> dict[str, set[str] | None]:
    """Sample names a scrape of this text yields, each with its label names.

    A family with no samples yet (a counter before its first kill) still counts, under the
    names Prometheus would store for its type (`_total` for counters, `_bucket`/`_sum`/
    `_count` for histograms); its label names are unknown (None) until it has a sample.
    """
    out: dict[str, set[str] | None] = {}
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_sum", "_count"),
        "summary": ("", "_sum", "_count"),
    }
    for family in text_string_to_metric_families(exposition):
        for suffix in suffixes.get(family.type, ("",)):
            out.setdefault(family.name + suffix, None)
        for sample in family.samples:
            out[sample.name] = (out.get(sample.name) or set()) | set(sample.labels)
    return out


def referenced_names() -> dict[str, set[str]]:
    """Metric name -> where it is named (rule expressions, annotations, dashboard queries)."""
    where: dict[str, set[str]] = {}
    sources = [("rule", e) for e in rule_expressions()]
    sources += [("dashboard", e) for e in dashboard_expressions(load_dashboard())]
    for origin, expr in sources:
        for name in metric_names(expr):
            where.setdefault(name, set()).add(f"{origin}: {expr.strip()}")
    for text in annotation_texts():  # a `query` in a template names metrics inside a string
        for name in re.findall(r"\boomwatch_[a-z0-9_]+", text):
            where.setdefault(name, set()).add(f"annotation: {text.strip()}")
    return where


def kube_state_metrics_misuse() -> dict[str, list[str]]:
    """kube-state-metrics names used outside the alerts allowed to use them (rule expressions,
    annotation queries of other rules, any dashboard query)."""
    misuse: dict[str, list[str]] = {}
    for rule in rules():
        texts = [rule["expr"], *rule.get("annotations", {}).values()]
        for name, allowed in KUBE_STATE_METRICS.items():
            if rule.get("alert") not in allowed and any(name in text for text in texts):
                misuse.setdefault(name, []).append(rule.get("alert") or rule["record"])
    for expr in dashboard_expressions(load_dashboard()):
        for name in metric_names(expr) & KUBE_STATE_METRICS.keys():
            misuse.setdefault(name, []).append(f"dashboard: {expr.strip()}")
    return misuse


def assert_all_exported(exported: dict[str, set[str] | None]) -> None:
    """Every name the rules and the dashboard use is exported, with the labels they match on
    (but for the few kube-state-metrics series of the agent-down alert, and only there)."""
    recorded = recording_names()
    external = PROMETHEUS_SYNTHETIC | KUBE_STATE_METRICS.keys() | NODE_EXPORTER
    missing = {
        name: sorted(where)
        for name, where in referenced_names().items()
        if name not in exported and name not in recorded and name not in external
    }
    assert not missing, f"named but not exported by the agent: {missing}"
    misuse = kube_state_metrics_misuse()
    assert not misuse, f"kube-state-metrics series outside their alert: {misuse}"
    for expr in rule_expressions() + dashboard_expressions(load_dashboard()):
        for name, labels in selector_labels(expr):
            known = exported.get(name)
            if known is not None:
                unknown = labels - known - TARGET_LABELS
                assert not unknown, f"{name} has no label {unknown} (in {expr.strip()})"
