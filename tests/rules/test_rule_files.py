"""The rule file passes promtool, every alert is unit-tested both ways, and the copies agree."""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from typing import Any

import yaml

from .promql import (
    PROMETHEUS_RULE_FILE,
    RULE_TESTS_DIR,
    RULES_FILE,
    RULES_README,
    alert_names,
    load_rule_groups,
    rules,
)

ISSUE_ALERTS = {
    "OOMKillDetected",
    "OOMKillChildProcess",
    "OOMKillGroup",
    "OOMKillCrashLoop",
    "NodeOOM",
    "ContainerMemoryNearLimit",
    "MemoryLimitApproaching",
    "FrameworkOutOfMemory",
    "OOMReportsIncomplete",
    "OOMWatchAgentDown",
}
RUNBOOK_BASE = "https://github.com/oomwatch/oomwatch/blob/main/rules/README.md#"


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_check_rules(promtool: str) -> None:
    result = _run([promtool, "check", "rules", str(RULES_FILE)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass(promtool: str) -> None:
    test_files = sorted(RULE_TESTS_DIR.glob("*.test.yaml"))
    assert test_files
    result = subprocess.run(
        [promtool, "test", "rules", *(p.name for p in test_files)],
        cwd=RULE_TESTS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(test_files), result.stdout


def test_exactly_the_issue_alerts_exist() -> None:
    assert alert_names() == ISSUE_ALERTS


def _unit_test_cases() -> list[dict[str, Any]]:
    cases = []
    for path in sorted(RULE_TESTS_DIR.glob("*.test.yaml")):
        spec = yaml.safe_load(path.read_text())
        assert spec["rule_files"] == ["../oomwatch.rules.yaml"], path
        for group in spec["tests"]:
            cases.extend(group.get("alert_rule_test", []))
    return cases


def test_every_alert_is_tested_firing_and_silent() -> None:
    fired: dict[str, int] = defaultdict(int)
    silent: dict[str, int] = defaultdict(int)
    for case in _unit_test_cases():
        if case.get("exp_alerts"):
            fired[case["alertname"]] += 1
            for alert in case["exp_alerts"]:
                # The firing cases pin every label and every annotation, not a subset.
                assert {"summary", "description", "runbook_url"} <= alert["exp_annotations"].keys()
                assert "severity" in alert["exp_labels"]
        else:
            silent[case["alertname"]] += 1
    assert set(fired) == ISSUE_ALERTS, f"no firing case for {ISSUE_ALERTS - set(fired)}"
    assert set(silent) == ISSUE_ALERTS, f"no silent case for {ISSUE_ALERTS - set(silent)}"


def _github_anchors(markdown: str) -> set[str]:
    anchors = set()
    for heading in re.findall(r"^#+\s+(.+?)\s*$", markdown, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_alerts_carry_severity_annotations_and_a_runbook_section() -> None:
    anchors = _github_anchors(RULES_README.read_text())
    for rule in rules():
        if "alert" not in rule:
            continue
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, name
        annotations = rule["annotations"]
        assert annotations.keys() == {"summary", "description", "runbook_url"}, name
        url = annotations["runbook_url"]
        assert url == RUNBOOK_BASE + name.lower(), name
        assert name.lower() in anchors, f"rules/README.md has no section '## {name}'"


def test_descriptions_name_the_pod_or_node_and_the_numbers() -> None:
    per_node = {"NodeOOM", "OOMReportsIncomplete"}
    per_container = ISSUE_ALERTS - per_node - {"OOMWatchAgentDown"}
    for rule in rules():
        name = rule.get("alert")
        description = rule.get("annotations", {}).get("description", "")
        if name in per_container:
            for label in ("namespace", "pod", "container", "pod_uid", "instance"):
                assert f"$labels.{label}" in description, (name, label)
        if name in per_container | per_node:
            assert "$value" in description, name
            assert "$labels.instance" in description, name


def test_prometheusrule_holds_the_same_groups() -> None:
    resource = yaml.safe_load(PROMETHEUS_RULE_FILE.read_text())
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    assert resource["spec"]["groups"] == load_rule_groups(), (
        "daemonset/prometheusrule.yaml differs from rules/oomwatch.rules.yaml: regenerate it "
        "with the command in its header comment"
    )
