"""`kubectl oomwatch top` leads with the diagnosis: the Event's summary carries the
verdict code; device OOMs of one workload (no limit scope) are one row per verdict; rows
rank by how actionable their verdict is before their kills, and a row's advice is its most
actionable verdict's."""

from __future__ import annotations

import json
from typing import Any

from support.frameworks import FRAGMENTED, TOO_LARGE, framework

from oomwatch.fleet.events import parse_event
from oomwatch.fleet.top import build, render
from oomwatch.kube.summary import SUMMARY_ANNOTATION, kill_summary


def _event(reason: str, summary: str, count: int, minute: int, pod: str = "trainer-0") -> Any:
    return parse_event(
        {
            "metadata": {
                "name": f"{pod}.{minute}",
                "namespace": "ml",
                "annotations": {SUMMARY_ANNOTATION: summary},
            },
            "involvedObject": {
                "kind": "Pod",
                "namespace": "ml",
                "name": pod,
                "fieldPath": "spec.containers{trainer}",
            },
            "reason": reason,
            "message": "m",
            "eventTime": f"2026-11-26T10:{minute:02d}:00.000000Z",
            "series": {
                "count": count,
                "lastObservedTime": f"2026-11-26T10:{minute:02d}:30.000000Z",
            },
            "reportingComponent": "oomwatch.io/agent",
            "reportingInstance": "oomwatch-gpu-1",
        }
    )


def test_device_ooms_are_a_row_per_verdict_and_fragmentation_leads() -> None:
    large = kill_summary(framework(TOO_LARGE), "StatefulSet/trainer", "trainer", "OutOfMemory")
    fragmented = kill_summary(
        framework(FRAGMENTED), "StatefulSet/trainer", "trainer", "OutOfMemory"
    )
    assert json.loads(fragmented)["verdict"] == "device-fragmentation"
    unknown = json.dumps(
        {
            "v": 1,
            "workload": "Deployment/web",
            "container": "app",
            "scope": "container",
            "verdict": "limit-unknown",
            "findings": [],
        }
    )
    sightings = [
        _event("OutOfMemory", large, 6, 1),
        _event("OutOfMemory", fragmented, 1, 2),
        _event("ContainerOOMKill", unknown, 40, 3, pod="web-7d4b9c8f6d-x2x9z"),
    ]
    ends = [1_795_000_000.0 + n * 3600 for n in range(24)]
    ends = [e - ends[-1] + sightings[-1].last_s + 60 for e in ends]
    rows = build(sightings, None, ends, 3600)
    assert [(r.workload, r.scope, r.kills) for r in rows] == [
        ("StatefulSet/trainer", "device-fragmentation", 1),
        ("StatefulSet/trainer", "device-too-large", 6),
        ("Deployment/web", "container", 40),
    ]
    assert "expandable_segments" in (rows[0].recommendation or "")
    text = render(rows, "header", [])
    assert text.index("device-fragmentation") < text.index("device-too-large")
    assert rows[0].to_dict()["verdict"] == "device-fragmentation"
