"""Real cgroup v2 OOM reports of Debian's 6.1 and 6.12 kernels (recorded by tests/kernel's v2
cases in the lab VM, tests/data/kernel-v2) decode as the kernel meant them: the same
assertions the live suite makes, on every recorded kernel, in milliseconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oomwatch.cgroup_identity import annotate
from oomwatch.cgroups.files import keyed_value
from oomwatch.decode import ReportAssembler, parse_kmsg_record
from oomwatch.incident import Incident
from oomwatch.reconcile import (
    SETTLE_S,
    CgroupNews,
    CounterKills,
    ReconcileState,
    reconcile,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "kernel-v2"
KERNELS = sorted(p.name for p in DATA.iterdir() if p.is_dir())
MIB = 1 << 20


def load(kernel: str, scenario: str) -> tuple[list[Incident], dict[str, Any]]:
    assembler = ReportAssembler()
    incidents: list[Incident] = []
    for raw in (DATA / kernel / f"{scenario}.kmsg").read_bytes().splitlines():
        record = parse_kmsg_record(raw)
        if record is not None:
            incidents.extend(assembler.feed(record))
    doc = json.loads((DATA / kernel / f"{scenario}.json").read_text())
    assert doc["kernel"] == kernel
    return incidents + assembler.flush(), doc


def ours(incidents: list[Incident], pids: set[int]) -> list[Incident]:
    return [i for i in incidents if any(v.pid in pids for v in i.victims)]


def events(doc: dict[str, Any], relpath: str, key: str, when: str = "after") -> int:
    text = doc[when][relpath]["memory.events"].encode()
    return keyed_value(text, key.encode()) or 0


def test_both_kernels_are_recorded() -> None:
    assert [k.split(".")[:2] for k in KERNELS] == [["6", "1"], ["6", "12"]], KERNELS


@pytest.mark.parametrize("kernel", KERNELS)
def test_single_kill(kernel: str) -> None:
    incidents, doc = load(kernel, "single-kill")
    [incident] = ours(incidents, {doc["facts"]["victim_pid"]})
    memcg = doc["facts"]["memcg"]
    assert (incident.kind, incident.oom_memcg, incident.task_memcg) == ("memcg", memcg, memcg)
    assert incident.memcg is not None and incident.memcg.limit_bytes == 64 << 20
    stats = incident.memcg_stats or {}
    # 6.1 prints memory.stat as one record (\x0a between lines), 6.12 a record per line
    assert {"anon", "file", "kernel", "shmem"} <= set(stats)
    assert incident.breakdown_bytes is not None and incident.breakdown_bytes.anon is not None
    assert incident.breakdown_bytes.anon >= 56 * MIB
    assert incident.kills_counted == 1 == events(doc, memcg, "oom_kill")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    ("scenario", "scope"),
    [
        ("kubelet-cgroupfs-pod-limit", "pod"),
        ("kubelet-systemd-pod-limit", "pod"),
        ("kubelet-systemd-container-limit", "container"),
    ],
)
def test_kubelet_trees_name_the_pod_and_the_limit(kernel: str, scenario: str, scope: str) -> None:
    incidents, doc = load(kernel, scenario)
    facts = doc["facts"]
    [incident] = [annotate(i) for i in ours(incidents, {facts["victim_pid"]})]
    assert incident.pod_uid == facts["pod_uid"] and incident.limit_scope == scope
    assert incident.task_memcg == facts["container"]
    assert incident.oom_memcg == (facts["pod"] if scope == "pod" else facts["container"])
    # the OOM counts where the limit was hit, the kill where the victim lived
    local = doc["after"][incident.oom_memcg]["memory.events.local"].encode()
    assert keyed_value(local, b"oom") == 1
    assert (
        keyed_value(doc["after"][facts["container"]]["memory.events.local"].encode(), b"oom_kill")
        == 1
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_group_kill_is_one_incident_counting_the_primary_twice(kernel: str) -> None:
    incidents, doc = load(kernel, "group-kill")
    facts = doc["facts"]
    members = set(facts["members"])
    [incident] = ours(incidents, members)
    assert incident.group_kill and incident.group_cgroup == facts["container"]
    assert incident.victim is not None and incident.victim.pid == facts["victim_pid"]
    assert {v.pid for v in incident.victims} == members and len(incident.victims) == len(members)
    gained = events(doc, facts["container"], "oom_kill") - events(
        doc, facts["container"], "oom_kill", "before"
    )
    assert incident.kills_counted == gained == len(members) + 1
    # oom_group_kill counts up the hierarchy like the others
    assert {events(doc, rel, "oom_group_kill") for rel in doc["after"]} == {1}
    # and the agent's reconciliation takes the report as explaining the whole counter
    t = incident.kernel_time_s or 0.0
    logged = reconcile(ReconcileState(), [incident], [], now_s=t + 0.1)
    assert logged.ready == [incident]
    rise = CounterKills(facts["container"], gained, t + 0.2, oom_group_kill=1)
    matched = reconcile(
        logged.state,
        [],
        CgroupNews(kills=(rise,), counted_at_s=t + 0.15),
        now_s=t + 0.2,
    )
    later = reconcile(matched.state, [], [], now_s=t + 0.2 + SETTLE_S)
    assert matched.ready == later.ready == [] and later.state.quiet  # nothing counter-only


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_group_kills_counts_read_before_its_last_line_are_its_own(kernel: str) -> None:
    """Each member is counted just before its own kill line, and the lines span 5-10 ms
    here: a counter read just before the last member's count (then counted apart) is still
    the report's, not a kill of its own (with an Event of its own).  Without the last line's
    time the 6.12 report's last count was ruled out (its lines span 9 ms)."""
    incidents, doc = load(kernel, "group-kill")
    facts = doc["facts"]
    [incident] = ours(incidents, set(facts["members"]))
    lines = (DATA / kernel / "group-kill.kmsg").read_bytes().splitlines()
    stamps = [
        r.kernel_time_s or 0.0
        for r in map(parse_kmsg_record, lines)
        if r is not None and "Killed process" in r.message
    ]
    t, last = incident.kernel_time_s or 0.0, stamps[-1]
    assert incident.last_kill_kernel_time_s == last and last > t
    gained = events(doc, facts["container"], "oom_kill")
    before = CounterKills(facts["container"], gained - 1, last - 0.0005, since_s=t - 0.1)
    state = reconcile(ReconcileState(), [], CgroupNews((before,), counted_at_s=t - 0.1), t).state
    logged = reconcile(state, [incident], [], now_s=last + 0.05)
    rest = CounterKills(facts["container"], 1, last + 0.2, oom_group_kill=1, since_s=last - 0.001)
    matched = reconcile(
        logged.state,
        [],
        CgroupNews((rest,), counted_at_s=last + 0.1),
        last + 0.2,
    )
    later = reconcile(matched.state, [], [], now_s=last + 0.2 + SETTLE_S)
    assert matched.ready == later.ready == [] and later.state.quiet  # nothing counter-only


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_primary_victims_kill_line_after_its_closed_report_is_counted_with_it(
    kernel: str,
) -> None:
    """Kill lines further apart than the live log waits (a starved node) close the group
    kill's report before the primary victim's second kill line: that line alone is a
    header-less kill of a pid just reported, the kernel's repeat, not a second kill."""
    raws = (DATA / kernel / "group-kill.kmsg").read_bytes().splitlines()
    records = [r for r in map(parse_kmsg_record, raws) if r is not None]
    cut = max(i for i, r in enumerate(records) if "Killed process" in r.message)
    assembler = ReportAssembler()
    incidents: list[Incident] = []
    for record in records[:cut]:
        incidents += assembler.feed(record)
    incidents += assembler.flush()  # the report was closed before its last kill line
    for record in records[cut:]:
        incidents += assembler.feed(record)
    doc = json.loads((DATA / kernel / "group-kill.json").read_text())
    facts = doc["facts"]
    group, repeat = ours(incidents + assembler.flush(), set(facts["members"]))
    assert repeat.header_suppressed and repeat.victim and repeat.victim.pid == facts["victim_pid"]
    t = group.kernel_time_s or 0.0
    state = reconcile(ReconcileState(), [group], [], t + 0.01).state
    second = reconcile(state, [repeat], [], t + 0.2)
    assert second.ready == [] and second.repeats == 1
    gained = events(doc, facts["container"], "oom_kill")
    rise = CounterKills(facts["container"], gained, t + 0.3, oom_group_kill=1, since_s=t - 0.1)
    news = CgroupNews((rise,), counted_at_s=t + 0.25)
    matched = reconcile(second.state, [], news, t + 0.3)
    later = reconcile(matched.state, [], [], now_s=t + 0.3 + SETTLE_S)
    assert matched.ready == later.ready == [] and later.state.quiet  # nothing counter-only


@pytest.mark.parametrize("kernel", KERNELS)
def test_child_worker(kernel: str) -> None:
    incidents, doc = load(kernel, "child-worker")
    facts = doc["facts"]
    [incident] = ours(incidents, {facts["victim_pid"]})
    assert {row.pid for row in incident.tasks} == {facts["victim_pid"], facts["parent_pid"]}
    assert incident.task_memcg == facts["memcg"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_burst_every_kill_once_header_or_not(kernel: str) -> None:
    incidents, doc = load(kernel, "burst")
    pids = doc["facts"]["victim_pids"]
    mine = ours(incidents, set(pids))
    assert sorted(i.victims[0].pid for i in mine) == sorted(pids)
    full = [i for i in mine if not i.header_suppressed]
    assert full and all(i.task_memcg == doc["facts"]["memcg"] for i in full)
    assert all(i.tasks == [] for i in mine if i.header_suppressed)
    assert events(doc, doc["facts"]["memcg"], "oom_kill") == len(pids)
