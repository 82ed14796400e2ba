"""The cause of a framework OOM on top (oomwatch.diagnosis.device): shared GPU, fragmentation,
a request larger than the device, the job's own footprint; and a claim shown as a claim.

SHARED is the message torch 2.11 printed on an H100 with a second process holding 40.5 GiB
(shared/notes/verified-here.md, 2026-11-26); HIDDEN is the same without the "Process N has"
clause, as torch prints it when NVML cannot see the other process (another PID namespace).
The others follow torch's format with the numbers of the runs issue 25 describes."""

from __future__ import annotations

from typing import Any

from oomwatch.diagnosis import diagnose
from oomwatch.incident import Incident
from oomwatch.probe.oom_messages import parse_torch_oom

GIB = 1 << 30
SHARED = (
    "CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a total capacity of 79.18 GiB of"
    " which 18.15 GiB is free. Process 439 has 40.51 GiB memory in use. Including non-PyTorch"
    " memory, this process has 20.51 GiB memory in use. Of the allocated memory 20.00 GiB is"
    " allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but"
    " unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    " to avoid fragmentation."
)
HIDDEN = SHARED.replace(" Process 439 has 40.51 GiB memory in use.", "")
FRAGMENTED = (
    "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.18 GiB of"
    " which 2.44 GiB is free. Including non-PyTorch memory, this process has 76.18 GiB memory in"
    " use. Of the allocated memory 57.00 GiB is allocated by PyTorch, and 19.00 GiB is reserved"
    " by PyTorch but unallocated."
)
TOO_LARGE = (
    "CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity of 79.18 GiB"
    " of which 78.60 GiB is free. Including non-PyTorch memory, this process has 590.00 MiB"
    " memory in use. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is"
    " reserved by PyTorch but unallocated."
)
FOOTPRINT = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.18 GiB of"
    " which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.50 GiB memory in"
    " use. Of the allocated memory 76.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved"
    " by PyTorch but unallocated."
)
CLAIM = {"pod_uid": "5f0c", "namespace": "ml", "pod": "trainer-0", "container": "trainer",
         "cgroup": None}  # fmt: skip


def framework(message: str, **extra: Any) -> Incident:
    """A framework incident as oomwatch.probe.join builds it from a probe's event."""
    parsed = parse_torch_oom(message)
    allocator = {
        "source": "probe",
        "framework": "torch-cuda",
        "device": parsed.device,
        "requested_bytes": parsed.requested_bytes,
        "free_bytes": parsed.free_bytes,
        "total_bytes": parsed.total_bytes,
        "allocated_bytes": parsed.allocated_bytes,
        "reserved_unallocated_bytes": parsed.reserved_unallocated_bytes,
        "process_bytes": parsed.process_bytes,
        "other_processes": [{"pid": p, "bytes": b} for p, b in parsed.other_processes],
        "message": message,
        "claimed": CLAIM,
        "identity": "unverified",
        **extra,
    }
    return diagnose(Incident(kind="framework", allocator=allocator))


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
    assert "other processes hold 40.5 GiB of its 79.2 GiB, process 439" in incident.verdict
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
    vouched = framework(FRAGMENTED, identity="pod_dir")
    assert "claimed" not in (vouched.verdict or "")
