"""`OOMIncident`: the shipped CRD is the generated one, its schema takes every object the
agent builds (the whole kernel-log corpus, a huge incident), the object stays within 16 KiB and
says what the stored diagnosis says; the Event's summary and the object agree with the stored
findings on a crash loop (no second diagnosis)."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest
import yaml
from support.fakeapi import oomincident_problem

from oomwatch.cgroup_identity import annotate
from oomwatch.decode.scan import decode_text
from oomwatch.diagnosis.history import History
from oomwatch.incident import (
    Finding,
    Incident,
    Invoker,
    MemcgUsage,
    PodContext,
    TaskRow,
    Timeline,
    TimelineSample,
    Victim,
)
from oomwatch.kube.crd import crd, crd_yaml
from oomwatch.kube.events import build_event
from oomwatch.kube.oomincident import (
    ANALYSIS_CUT,
    MAX_ANALYSIS_BYTES,
    MAX_OBJECT_BYTES,
    Fingerprint,
    IncidentKey,
    build_object,
    object_bytes,
    read_incident,
)
from oomwatch.kube.summary import kill_summary, parse_summary
from oomwatch.report.text import render_incident

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "corpus"
FP = Fingerprint("shop", "Deployment/web", "app", "limit-container", "node-a")
SEEN = "2026-11-26T10:00:00.000000Z"


def _object(incident: Incident, fp: Fingerprint = FP) -> dict[str, object]:
    return build_object(incident, fp, pod="web-1", kills=3, first_seen=SEEN, last_seen=SEEN)


@pytest.mark.parametrize(
    "path",
    [REPO / "daemonset" / "crd-oomincident.yaml", REPO / "charts/oomwatch/crds/oomincidents.yaml"],
)
def test_shipped_crd_is_the_generated_one(path: Path) -> None:
    assert path.read_text() == crd_yaml(), "regenerate: python -m oomwatch.kube.crd > " + str(path)
    assert yaml.safe_load(path.read_text()) == crd()


def test_crd_has_the_printer_columns_and_a_namespaced_scope() -> None:
    spec = crd()["spec"]
    assert spec["scope"] == "Namespaced"
    assert spec["group"] == "oomwatch.io"
    columns = [c["name"] for c in spec["versions"][0]["additionalPrinterColumns"]]
    for wanted in ("Workload", "Container", "Kills", "Limit", "Verdict", "Age"):
        assert wanted in columns


def _corpus_incidents() -> list[Incident]:
    history = History()
    out = []
    for path in sorted(CORPUS.glob("*.log")):
        for incident in decode_text(path.read_bytes()).incidents:
            out.append(history.diagnose(annotate(incident)))
    return out


def test_the_schema_takes_every_object_built_from_the_corpus() -> None:
    incidents = _corpus_incidents()
    assert len(incidents) > 50
    for incident in incidents:
        obj = _object(incident)
        assert oomincident_problem(obj) is None, (incident.wall_time, oomincident_problem(obj))
        assert object_bytes(obj) <= MAX_OBJECT_BYTES
        back = read_incident(obj)
        assert back is not None
        # The one diagnosis, as stored: nothing re-diagnosed, nothing reworded.
        assert back.verdict == incident.verdict
        assert back.recommendation == incident.recommendation
        assert [f.code for f in back.findings] == [f.code for f in incident.findings]


def _huge() -> Incident:
    big = "x" * 50_000
    return Incident(
        kind="memcg",
        limit_scope="container",
        wall_time="2026-11-26T10:00:00+00:00",
        oom_memcg="/kubepods/" + big,
        task_memcg="/kubepods/" + big,
        memcg=MemcgUsage(usage_bytes=1 << 30, limit_bytes=1 << 30),
        memcg_stats={f"stat{i}": i for i in range(5000)},
        tasks=[TaskRow(pid=i, name=f"worker-{i}", rss_pages=i) for i in range(20_000)],
        victims=[Victim(pid=i, comm="\x1b[2J" + "v" * 200) for i in range(2000)],
        timeline=Timeline(
            samples=[TimelineSample(t_seconds=i, usage_bytes=i) for i in range(10_000)]
        ),
        k8s=PodContext(namespace="shop", pod="web-1", container="app"),
        allocator={
            "source": "probe",
            "identity": "pod_dir",
            "framework": "torch-cuda",
            "device_samples": [{"wall_s": i} for i in range(10_000)],
            "note": big,
        },
        findings=[Finding("limit-container", "critical", big, {"blob": big}) for _ in range(40)],
        recommendation={"action": "resize", "message": big, "based_on": {"blob": big}},
        verdict="app was killed at its limit. " + big,
        verdict_code="limit-container",
        notes=[big] * 100,
    )


def test_a_huge_incident_fits_16_kib_and_still_validates() -> None:
    obj = _object(_huge())
    assert object_bytes(obj) <= MAX_OBJECT_BYTES
    assert oomincident_problem(obj) is None
    back = read_incident(obj)
    assert back is not None and back.kind == "memcg" and back.verdict_code == "limit-container"
    assert back.findings and back.findings[0].code == "limit-container"
    assert str(obj["verdict"]).startswith("app was killed at its limit.")


def test_the_object_carries_the_text_report_for_kubectl_describe() -> None:
    """`analysis` is `oomwatch report`'s block for the incident, word for word."""
    incident = next(i for i in _corpus_incidents() if i.recommendation and i.verdict)
    analysis = _object(incident)["analysis"]
    assert analysis == render_incident(incident, 1, 1)
    assert f"VERDICT    {incident.verdict}" in str(analysis)


def test_a_huge_report_is_cut_at_a_line_with_a_marker_never_inside_an_escape() -> None:
    for verdict in ("x" * 50_000, "\x1b" * 20_000, "é" * 9_000 + "\x1b" * 5_000):
        huge = _huge()
        huge = Incident.from_dict({**huge.to_dict(), "verdict": "app was killed. " + verdict})
        obj = _object(huge)
        analysis = str(obj["analysis"])
        assert object_bytes(obj) <= MAX_OBJECT_BYTES
        assert len(json.dumps(analysis, ensure_ascii=False).encode()) <= MAX_ANALYSIS_BYTES
        assert analysis.startswith("== OOM 1 of 1") and analysis.endswith("\n" + ANALYSIS_CUT)
        assert "\x1b" not in analysis
        cut = analysis.splitlines()[-2]
        assert cut.startswith("  VERDICT    app was killed.")
        assert not cut.rstrip("\\x1b").endswith("\\"), "an escape cut short"
        assert cut.endswith(("x", "\\x1b", "é"))


def test_no_string_a_pod_chose_reaches_kubectl_describe_raw() -> None:
    """kubectl prints an object's strings as they are: the object holds them escaped."""
    strings: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str):
            strings.append(value)

    walk(_object(_huge()))
    assert not any("\x1b" in s for s in strings)
    assert any(s.startswith("\\x1b[2J") for s in strings)  # the victim's name, escaped


def test_an_unvouched_allocator_stays_on_the_node() -> None:
    allocator = {"source": "probe", "identity": "unverified", "claimed": {"pod": "other"}}
    incident = Incident(kind="framework", allocator=allocator)
    incident = History().diagnose(incident)
    assert "allocator" not in _object(incident)["incident"]  # type: ignore[operator]


def test_a_crash_loop_reads_the_same_in_the_note_the_summary_and_the_object() -> None:
    """The note, the Event's summary and the object carry the stored diagnosis, `crash-loop`
    included; none re-diagnoses without the history."""
    from support.fakeapi import make_pod

    from oomwatch.kube.pods import decode_pod

    pod = decode_pod(make_pod())
    assert pod is not None
    history = History()
    stored: list[Incident] = []
    for i in range(4):
        incident = Incident(
            kind="memcg",
            limit_scope="container",
            kernel_time_s=float(i),
            wall_time=f"2026-11-26T10:0{i}:00+00:00",
            pod_uid=pod.uid,
            memcg=MemcgUsage(usage_bytes=256 << 20, limit_bytes=256 << 20),
            victims=[Victim(pid=100 + i, comm="python", anon_rss_bytes=250 << 20)],
            k8s=PodContext(namespace=pod.namespace, pod=pod.name, container="app"),
        )
        stored.append(history.diagnose(incident))
        history.remember(stored[-1])
    last = stored[-1]
    codes = [f.code for f in last.findings]
    assert "crash-loop" in codes
    draft = build_event(last, "node-a", datetime.now(UTC), pod)
    assert draft is not None
    summary = parse_summary(draft.body["metadata"]["annotations"]["oomwatch.io/summary"])
    assert summary is not None and summary["findings"] == codes
    assert f"Findings: {', '.join(codes)}." in draft.body["note"]
    assert "kubectl oomwatch report pod/" in draft.body["note"]
    assert " exec " not in draft.body["note"]
    obj = _object(last)
    assert [f["code"] for f in obj["incident"]["findings"]] == codes  # type: ignore[index]
    assert (
        json.loads(kill_summary(last, "Deployment/web", "app", "ContainerOOMKill"))["findings"]
        == codes
    )


def test_the_shrink_steps_name_real_fields() -> None:
    """Each step drops something an incident has (the recommendation's key mypy checks)."""
    assert set(get_args(IncidentKey)) <= {f.name for f in fields(Incident)}
    assert "evidence" in {f.name for f in fields(Finding)}


def test_the_recommendations_basis_goes_and_its_advice_stays() -> None:
    """Just over the budget with the advice's repeated evidence: that step shrinks it into
    the object, and the steps after it (the cgroup paths) are not taken."""
    basis = {f"key{i}": "e" * 1000 for i in range(20)}  # 20 KB, no string clipped
    incident = Incident(
        kind="memcg",
        wall_time="2026-11-26T10:00:00+00:00",
        oom_memcg="/kubepods/pod1/app",
        task_memcg="/kubepods/pod1/app",
        invoker=Invoker(comm="java", pid=42),
        k8s=PodContext(namespace="shop", pod="web-1", container="app"),
        recommendation={"action": "resize", "message": "raise the limit", "based_on": basis},
        verdict_code="limit-container",
    )
    obj = _object(incident)
    assert object_bytes(obj) <= MAX_OBJECT_BYTES
    kept = obj["incident"]
    assert isinstance(kept, dict)
    assert kept["recommendation"] == {"action": "resize", "message": "raise the limit"}
    assert kept["invoker"] == {"comm": "java", "pid": 42}
    assert kept["task_memcg"] == "/kubepods/pod1/app"
