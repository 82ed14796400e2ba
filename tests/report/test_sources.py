"""`oomwatch report --store DIR` on a store the daemon wrote, and the live kernel log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.contract import validate_report
from support.report_cli import corpus_file, section_order

from oomwatch.cgroup_identity import annotate
from oomwatch.decode import decode_text
from oomwatch.incident import PodContext, Timeline, TimelineSample
from oomwatch.store import IncidentStore

MIB = 1 << 20


def _stored(corpus: Path, tmp_path: Path) -> Path:
    """A store holding the corpus 02 kill three times (a crash loop) with pod names."""
    [incident] = [
        i for i in decode_text(Path(corpus_file(corpus, "02")).read_text()).incidents if i.victims
    ]
    store = IncidentStore(tmp_path)
    for n in range(3):
        inc = annotate(incident)
        inc.kernel_time_s = 1000.0 + n
        inc.wall_time = f"2026-11-22T08:0{n}:00+00:00"
        inc.k8s = PodContext(namespace="ml", pod="trainer-0", container="train")
        inc.timeline = Timeline(
            samples=[TimelineSample(1000.0 + t, (40 + t) * MIB, 100 * MIB) for t in range(60)],
            interval_seconds=1.0,
            peak_bytes=99 * MIB,
            usage_at_kill_bytes=99 * MIB,
        )
        assert store.add(inc)
    store.close()
    return tmp_path


def test_store_with_filters_and_crash_loop_history(report, corpus: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    state = str(_stored(corpus, tmp_path))
    doc = report("--store", state, "--json").json()
    assert len(doc["incidents"]) == 3
    assert report("--store", state, "--json", "--pod", "ml/trainer-0").json()["incidents"]
    assert report("--store", state, "--json", "--pod", "other").json()["incidents"] == []
    [last] = report("--store", state, "--json", "--last", "1").json()["incidents"]
    codes = {f["code"] for f in last["findings"]}
    # the two earlier kills are outside --last 1 but still count for the crash loop
    assert {"limit-pod", "crash-loop", "leak-trend"} <= codes
    assert last["recommendation"]["limit_will_not_help"] is True
    text = report("--store", state, "--last", "1").out
    assert "pod ml/trainer-0 container train" in text
    labels = ["VERDICT", "findings:", "breakdown", "timeline", "pod", "victim"]
    order = section_order(text, labels)
    assert order == sorted(order)
    assert "60 samples over 59 s" in text.splitlines()[order[3]]


def test_store_that_is_not_a_database_exits_2(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "oomwatch.db").write_bytes(b"this is not sqlite" * 100)
    run = report("--store", str(tmp_path))
    assert run.rc == 2 and str(tmp_path) in run.err


def test_live_kernel_log(report) -> None:  # type: ignore[no-untyped-def]
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here (needs root)")
    run = report("--json")
    assert run.rc == 0, run.err
    doc = run.json()
    assert set(doc) == {"schema_version", "incidents", "warnings"}
    for incident in doc["incidents"]:
        assert incident["source_format"] == "kmsg"
        if incident["kernel_time_s"] is not None:
            assert incident["wall_time"]  # derived from the boot time


def test_unreadable_kmsg_exits_2(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = report("--kmsg", str(tmp_path / "nope"))
    assert run.rc == 2 and "nope" in run.err


def test_kmsg_device_given_as_file_reads_the_ring_without_blocking() -> None:
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here (needs root)")
    proc = subprocess.run(
        [sys.executable, "-m", "oomwatch.cli", "report", "/dev/kmsg", "--json"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate_report(doc)
    assert set(doc) == {"schema_version", "incidents", "warnings"}
