"""The cause of a framework OOM on top (oomwatch.diagnosis.device): shared GPU, fragmentation,
a request larger than the device, the job's own footprint; and a claim shown as a claim
(the messages: support.frameworks)."""

from __future__ import annotations

from support.contract import validate_stored
from support.frameworks import (
    FOOTPRINT,
    FRAGMENTED,
    GIB,
    HIDDEN,
    SHARED,
    TOO_LARGE,
    framework,
)

from oomwatch.diagnosis import unknowns
from oomwatch.probe.oom_messages import parse_torch_oom


def test_the_recorded_shared_gpu_message_names_the_other_process() -> None:
    parsed = parse_torch_oom(SHARED)
    assert parsed.other_processes == ((439, round(40.51 * GIB)),)
    assert parsed.process_bytes == round(20.51 * GIB)
    incident = framework(SHARED)
    assert incident.verdict_code == "device-shared"
    cause = next(f for f in incident.findings if f.code == "device-shared")
    others = round(79.18 * GIB) - round(18.15 * GIB) - round(20.51 * GIB)
    assert cause.evidence["others_bytes"] == others
    assert cause.evidence["other_processes"] == [{"pid": 439, "bytes": round(40.51 * GIB)}]
    assert "process 439 40.5 GiB" in cause.message
    assert incident.verdict is not None and "batch is not the fix" in incident.verdict
    assert "others hold 40.5 GiB of the 79.2 GiB device, process 439" in incident.verdict
    validate_stored(incident.to_dict())
    rec = incident.recommendation or {}
    assert rec["action"] == "free-shared-device" and "batch size is not the fix" in rec["message"]


def test_a_hidden_other_process_is_still_counted() -> None:
    incident = framework(HIDDEN)
    assert parse_torch_oom(HIDDEN).other_processes == ()
    assert incident.verdict_code == "device-shared"
    cause = next(f for f in incident.findings if f.code == "device-shared")
    assert "none of them visible from this container" in cause.message
    assert cause.evidence["other_processes"] == []


def test_fragmentation_leads_and_is_fixed_by_expandable_segments() -> None:
    incident = framework(FRAGMENTED)
    assert incident.verdict_code == "device-fragmentation"
    assert incident.verdict is not None
    assert "expandable_segments:True" in incident.verdict and "fragmentation" in incident.verdict
    assert (incident.recommendation or {})["action"] == "fix-fragmentation"


def test_a_request_larger_than_the_device_is_not_fragmentation() -> None:
    incident = framework(TOO_LARGE, reserved_unallocated_bytes=8 * GIB, allocated_bytes=GIB)
    assert incident.verdict_code == "device-too-large"
    assert "device-fragmentation" not in {f.code for f in incident.findings}
    assert (incident.recommendation or {})["action"] == "reduce-device-memory"


def test_the_jobs_own_footprint() -> None:
    incident = framework(FOOTPRINT)
    assert incident.verdict_code == "device-footprint"
    assert "lower the batch size" in (incident.verdict or "")


def test_without_numbers_no_cause_is_invented() -> None:
    incident = framework("CUDA out of memory.")
    assert incident.verdict_code == "framework-oom"
    assert [f.code for f in incident.findings] == ["framework-oom"]


def test_an_unvouched_claim_is_shown_as_a_claim() -> None:
    incident = framework(FRAGMENTED)
    assert "in claimed pod ml/trainer-0 (unverified) asking" in (incident.verdict or "")
    facts = incident.findings[0]
    assert "claimed pod ml/trainer-0 container trainer (unverified)" in facts.message
    assert "unknown cgroup" not in (incident.verdict or "")
    assert unknowns(incident)[0].startswith("pod unverified: only the probe file claims it")
    vouched = framework(FRAGMENTED, identity="pod_dir")
    assert "claimed" not in (vouched.verdict or "")
