"""A CUDA OOM keeps the allocator's snapshot summary (largest segments, largest free block,
fragmentation), and the device's memory gets its own axis in the HTML plot.  No GPU here: the
CUDA code runs for real against torch's public API (`torch.cuda.memory_snapshot()`,
`memory_stats()`), which the test answers with the structures torch documents."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.contract import validate_stored
from support.frameworks import memory_stats_after_one_64_mib_tensor

from oomwatch.diagnosis import diagnose
from oomwatch.incident import Incident, Timeline, TimelineSample
from oomwatch.probe import probe as probe_module
from oomwatch.probe.join import framework_incident
from oomwatch.probe.reader import ProbeDirReader
from oomwatch.probe.schema import FrameworkOomEvent, SchemaError, event_from_payload, to_payload
from oomwatch.probe.snapshot import summarize_segments
from oomwatch.report import facts, page

torch = pytest.importorskip("torch")

MiB, GiB = 1 << 20, 1 << 30
OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB"
    " of which 1.10 GiB is free. Including non-PyTorch memory, this process has 78.03 GiB"
    " memory in use. Of the allocated memory 70.40 GiB is allocated by PyTorch, and 6.91 GiB"
    " is reserved by PyTorch but unallocated."
)


def block(size: int, state: str) -> dict[str, Any]:
    return {"address": 0, "size": size, "requested_size": size, "state": state, "frames": []}


def segment(device: int, blocks: list[dict[str, Any]], kind: str = "large") -> dict[str, Any]:
    """One cudaMalloc'd segment as `torch.cuda.memory_snapshot()` lists it."""
    live = [b for b in blocks if b["state"] != "inactive"]
    return {
        "device": device,
        "address": 0,
        "stream": 0,
        "segment_type": kind,
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "total_size": sum(b["size"] for b in blocks),
        "allocated_size": sum(b["size"] for b in live if b["state"] == "active_allocated"),
        "active_size": sum(b["size"] for b in live),
        "requested_size": sum(b["size"] for b in live),
        "blocks": blocks,
    }


# Device 0 after a long run: 7 GiB free inside the segments, in pieces of at most 1.5 GiB;
# the request is 2 GiB.  Device 1 is another process's business.
SEGMENTS = [
    segment(0, [block(20 * GiB, "active_allocated"), block(1536 * MiB, "inactive"),
                block(10 * GiB, "active_allocated"), block(1 * GiB, "inactive")]),
    segment(0, [block(30 * GiB, "active_allocated"), block(1536 * MiB, "inactive"),
                block(2 * GiB, "active_pending_free")]),
    segment(0, [block(1 * GiB, "inactive"), block(1 * GiB, "inactive"),
                block(1 * GiB, "inactive"), block(8 * GiB, "active_allocated")]),
    segment(0, [block(2 * MiB, "inactive")], kind="small"),
    segment(1, [block(40 * GiB, "inactive")]),
]  # fmt: skip


def test_the_summary_of_one_devices_segments() -> None:
    summary = summarize_segments(SEGMENTS, 0)
    assert summary is not None
    free = (1536 + 1024 + 1536 + 3 * 1024 + 2) * MiB
    assert (summary["segments"], summary["largest_free_block_bytes"]) == (4, 1536 * MiB)
    assert summary["reserved_bytes"] == summary["active_bytes"] + free
    assert summary["allocated_bytes"] == 68 * GiB  # the pending-free block is active only
    assert summary["inactive_split_bytes"] == free - 2 * MiB  # the small segment is all free
    assert summary["fragmentation"] == round(1 - 1536 * MiB / free, 4)
    sizes = [s["total_bytes"] for s in summary["largest_segments"]]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == 4
    assert summary["largest_segments"][0]["blocks"] == 3
    assert summarize_segments(SEGMENTS, 7) is None
    assert summarize_segments([{"device": 0, "total_size": "junk", "blocks": "x"}], 0) == {
        "device": 0,
        "segments": 1,
        "reserved_bytes": 0,
        "allocated_bytes": 0,
        "active_bytes": 0,
        "inactive_split_bytes": 0,
        "largest_free_block_bytes": 0,
        "fragmentation": 0.0,
        "largest_segments": [
            {
                "total_bytes": 0,
                "allocated_bytes": 0,
                "active_bytes": 0,
                "largest_free_block_bytes": 0,
                "blocks": 0,
                "segment_type": None,
            }
        ],
    }


@pytest.fixture
def cuda_in_use(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """torch.cuda as a process that has used the GPU sees it (the functions the probe calls)."""
    calls: list[dict[str, Any]] = []

    def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> Any:
        calls.append({"include_traces": include_traces})
        return SEGMENTS

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda, "memory_stats", lambda device=None: dict(memory_stats_after_one_64_mib_tensor())
    )
    monkeypatch.setattr(torch.cuda, "memory_snapshot", memory_snapshot)
    return calls


def _recorded(tmp_path: Path) -> Incident:
    probe = probe_module.start(tmp_path, interval_s=3600, excepthooks=False, env=lambda _: None)
    try:
        for step in range(3):
            probe.set_phase("train", epoch=1, step=step, batch_size=512)
            probe.sample_now()
            time.sleep(0.01)  # samples apart in time, as a trainer's are
        assert probe.record_oom(torch.OutOfMemoryError(OOM))
    finally:
        probe.stop()
    [record] = ProbeDirReader(tmp_path).read_all()
    [event] = record.events
    return diagnose(framework_incident(record, event, time.time()))


def test_a_cuda_oom_keeps_the_snapshot_and_the_diagnosis_reads_it(
    tmp_path: Path, cuda_in_use: list[dict[str, Any]]
) -> None:
    incident = _recorded(tmp_path)
    assert cuda_in_use == [{"include_traces": False}]  # the fast snapshot, once
    alloc = incident.allocator or {}
    snapshot = alloc["snapshot"]
    assert snapshot["device"] == 0 and snapshot["largest_free_block_bytes"] == 1536 * MiB
    assert len(snapshot["largest_segments"]) == 4
    device = alloc["device_samples"]  # every sample before the OOM: the GPU axis' line
    assert len(device) >= 4 and {s["allocated_bytes"] for s in device} == {64 * MiB}
    validate_stored(incident.to_dict())
    [finding] = [f for f in incident.findings if f.code == "framework-oom"]
    assert finding.evidence["fragmented"] is True
    assert finding.evidence["largest_free_block_bytes"] == 1536 * MiB
    assert "largest free block 1.5 GiB" in finding.message
    assert "no block of 2 GiB: fragmentation" in finding.message
    assert "expandable_segments" in (incident.recommendation or {})["message"]
    row = dict(facts.facts(incident))["allocator"]
    assert row.startswith("torch-cuda cuda:0; phase train epoch 1 step 2 batch_size 512;")
    assert "snapshot: 4 segments" in row and "largest free block 1.5 GiB" in row


def test_the_device_has_its_own_axis_in_the_html_plot(
    tmp_path: Path, cuda_in_use: list[dict[str, Any]]
) -> None:
    cuda_oom = _recorded(tmp_path)
    html = page.render([cuda_oom], [], "test")
    assert "No memory numbers" not in html
    assert re.findall(r'class="tick tick-device"[^>]*>([^<]*)<', html)[-1].endswith("GiB")
    assert 'class="device-total"' in html  # the 79 GiB the message gave
    assert 'class="allocator-allocated"' in html and "device allocated" in html

    # A kernel kill of a probed trainer: 300 MiB of host memory beside 64 MiB... and 70 GiB of
    # GPU memory: each on its own axis, the host axis not squashed by the device's.
    start = 1_700_000_000.0
    samples = [
        TimelineSample(start + t, (100 + t) * MiB, 300 * MiB, (100 + t) * MiB) for t in range(60)
    ]
    device = [
        {"wall_s": start + t, "allocated_bytes": 70 * GiB, "reserved_bytes": 75 * GiB}
        for t in range(0, 60, 5)
    ]
    kill = diagnose(
        Incident(
            kind="memcg",
            limit_scope="container",
            task_memcg="/c",
            timeline=Timeline(samples=samples),
            allocator={"device_samples": device},
        )
    )
    html = page.render([kill], [], "test")
    host_ticks = re.findall(r'class="tick tick-y"[^>]*>([^<]*)<', html)
    device_ticks = re.findall(r'class="tick tick-device"[^>]*>([^<]*)<', html)
    assert host_ticks[-1].endswith("MiB") and device_ticks[-1].endswith("GiB")
    assert html.count('<polyline class="allocator-') == 2


def test_the_daemon_refuses_a_forged_snapshot() -> None:
    """The snapshot comes from a file any pod can write: a closed schema, like every field."""
    good = summarize_segments(SEGMENTS, 0)
    event = FrameworkOomEvent(
        wall_s=1.0, mono_s=1.0, framework="torch-cuda", message="x", snapshot=good
    )
    assert event_from_payload(to_payload(event), seq=1).snapshot == good
    for forged, why in (
        ({**(good or {}), "owner": "root"}, "unknown keys"),
        ({**(good or {}), "fragmentation": 3.5}, "fragmentation"),
        ({**(good or {}), "reserved_bytes": -1}, "reserved_bytes"),
        ({**(good or {}), "largest_segments": [{}] * 9}, "at most 8 segments"),
        ({**(good or {}), "largest_segments": [{"total_bytes": "1"}]}, "total_bytes"),
    ):
        with pytest.raises(SchemaError, match=why):
            event_from_payload(to_payload(replace(event, snapshot=forged)), seq=1)
