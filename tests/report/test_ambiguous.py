"""A kill the kernel's evidence cannot place in one pod reads "one of pods A, B" everywhere."""

from __future__ import annotations

from oomwatch.cgroup_identity import annotate
from oomwatch.diagnosis import diagnose
from oomwatch.diagnosis.verdict import short_where
from oomwatch.incident import Attribution, AttributionCandidate, Incident, Victim
from oomwatch.report import page, text
from oomwatch.report.filters import pod_matches
from oomwatch.sinks.log import incident_fields

A = "/kubepods/besteffort/pod11111111-0000-4000-8000-000000000001/" + "a" * 64
B = "/kubepods/besteffort/pod22222222-0000-4000-8000-000000000002/" + "b" * 64
REASON = "two cgroups' oom_kill counters rose at its time"


def ambiguous() -> Incident:
    incident = Incident(
        kind="memcg",
        kernel_time_s=10.0,
        header_suppressed=True,
        victims=[Victim(pid=4242, comm="python3", anon_rss_bytes=40000 * 1024)],
        attribution=Attribution(
            "counter", "ambiguous", [AttributionCandidate(A), AttributionCandidate(B)], REASON
        ),
    )
    incident = annotate(incident)
    assert incident.attribution is not None
    incident.attribution.candidates[0].namespace = "ml"
    incident.attribution.candidates[0].pod = "worker-0"
    return incident


def test_candidates_get_their_pod_uids_and_no_pod_is_charged() -> None:
    incident = ambiguous()
    assert incident.pod_uid is None and incident.container_id is None
    assert incident.attribution is not None
    assert [c.pod_uid for c in incident.attribution.candidates] == [
        "11111111-0000-4000-8000-000000000001",
        "22222222-0000-4000-8000-000000000002",
    ]
    assert incident.attribution.describe() == (
        "one of pods ml/worker-0, uid 22222222-0000-4000-8000-000000000002"
    )


def test_text_and_html_reports_say_one_of_pods() -> None:
    incident = ambiguous()
    out = text.render([incident], [], "test")
    assert "one of pods ml/worker-0, uid 22222222-0000-4000-8000-000000000002" in out
    assert "ambiguous" in out and REASON in out
    assert "one of pods ml/worker-0" in page.render([incident], [], "test")


def test_pod_filter_finds_an_ambiguous_kill_by_any_candidate() -> None:
    incident = ambiguous()
    assert pod_matches(incident, "ml/worker-0") and pod_matches(incident, "worker-0")
    assert pod_matches(incident, "22222222-0000-4000-8000-000000000002")
    assert not pod_matches(incident, "ml/worker-1")


def test_log_line_names_the_candidates_and_why() -> None:
    fields = incident_fields(diagnose(ambiguous()))
    assert "in one of pods ml/worker-0, uid 22222222-" in fields["message"]
    assert "k8s.pod.uid" not in fields and fields["attribution"] == "ambiguous"
    assert fields["attribution_reason"] == REASON
    assert [c["cgroup"] for c in fields["candidates"]] == [A, B]
    # Candidates follow the line's rules: OpenTelemetry names, nothing unknown, no nulls.
    assert fields["candidates"][0]["k8s.pod.name"] == "worker-0"
    assert all(None not in c.values() for c in fields["candidates"])
    assert all("k8s.pod.uid" in c for c in fields["candidates"])


def test_the_verdict_and_summary_cell_say_one_of_pods() -> None:
    assert short_where(ambiguous()) == ("one of pods ml/worker-0, 22222222")
