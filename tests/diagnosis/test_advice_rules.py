"""Claims and advice only where their evidence is present, one test per rule, on
the public corpus where it has the case and on built incidents for the edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.cgroup_identity import annotate
from oomwatch.decode import decode_kmsg_records, decode_text
from oomwatch.diagnosis import diagnose, verdict
from oomwatch.incident import Incident, MemcgUsage, Victim

CORPUS = Path(__file__).resolve().parent.parent / "data" / "corpus"
MIB = 1 << 20


def _corpus(prefix: str) -> list[Incident]:
    [path] = CORPUS.glob(f"{prefix}-*.log")
    return [diagnose(annotate(i)) for i in decode_text(path.read_bytes()).incidents]


def _codes(incident: Incident) -> set[str]:
    return {f.code for f in incident.findings}


@pytest.mark.parametrize("prefix", ["07", "25", "34", "38", "50", "51"])
def test_a_pasted_fragment_is_never_called_rate_limited(prefix: str) -> None:
    """Kill lines without their report in a saved log: cut, filtered or rate-limited, the
    log alone cannot say which, so no incident claims the kernel rate-limited it."""
    incidents = _corpus(prefix)
    assert any(i.victims for i in incidents)
    for incident in incidents:
        assert not incident.header_suppressed
        assert "rate-limited-report" not in _codes(incident)


def test_rate_limited_only_where_the_kernel_or_the_live_log_says_so() -> None:
    """The kernel's own `oom_kill_process: N callbacks suppressed` (corpus 44, a linux-mm
    console log), or the live /dev/kmsg stream where every printed line arrives."""
    said = _corpus("44")[0]
    assert said.header_suppressed and "rate-limited-report" in _codes(said)
    bare = (
        b"3,7,1000000,-;Memory cgroup out of memory: Killed process 9 (hog) total-vm:1kB,"
        b" anon-rss:1kB, file-rss:0kB, shmem-rss:0kB\n"
    )
    [live] = decode_kmsg_records([bare]).incidents
    assert "rate-limited-report" in _codes(diagnose(live))
    [pasted] = decode_text(bare.decode()).incidents
    assert "rate-limited-report" not in _codes(diagnose(pasted))


@pytest.mark.parametrize(("prefix", "index"), [("25", 0), ("48", 0), ("59", 0), ("50", 1)])
def test_no_limit_sized_from_a_killed_childs_rss(prefix: str, index: int) -> None:
    """A memcg kill without the cgroup's usage: the victim may be one small child (the kernel
    selected its parent, corpus 25/48/59; a 164 KiB `mount`, corpus 50), so nothing is sized."""
    incident = _corpus(prefix)[index]
    assert incident.kind == "memcg" and incident.recommendation is None
    assert "Raise" not in verdict(incident) and "Mi" not in verdict(incident).split("—")[-1]


def test_memcg_limit_is_sized_from_the_cgroups_usage_not_the_victim() -> None:
    incident = Incident(
        kind="memcg",
        oom_memcg="/kubepods/burstable/pod1/c1",
        task_memcg="/kubepods/burstable/pod1/c1",
        memcg=MemcgUsage(usage_bytes=512 * 2**20, limit_bytes=512 * 2**20, failcnt=3),
        victims=[Victim(pid=7, comm="sh", anon_rss_bytes=60 * 1024)],
        selected_pid=6,
    )
    rec = diagnose(annotate(incident)).recommendation
    assert rec is not None and rec["memory_limit"] == "615Mi"  # 512 MiB + 20 %, not 60 KiB
    assert rec["usage_at_kill_bytes"] == 512 * MIB


def test_global_kill_of_a_sacrificed_child_is_not_sized_for_its_pod() -> None:
    base = Incident(
        kind="global",
        task_memcg="/kubepods/burstable/pod1/c1",
        victims=[Victim(pid=7, comm="sh", anon_rss_bytes=60 * 1024)],
    )
    chosen = diagnose(annotate(base)).recommendation
    assert chosen is not None and chosen["memory_request"] == "1Mi"  # it was the one chosen
    base.selected_pid = 6  # pre-5.1: the kernel chose pid 6 and killed its child
    sacrificed = diagnose(annotate(base)).recommendation
    assert sacrificed is not None and sacrificed["action"] == "relieve-node"
    assert sacrificed["memory_request"] is None and sacrificed["memory_limit"] is None


@pytest.mark.parametrize(("prefix", "index"), [("31", 0), ("34", 0), ("35", 0), ("36", 0)])
def test_no_recommendation_for_a_kill_of_unknown_kind(prefix: str, index: int) -> None:
    """RHEL 6/7 kill lines alone do not say whether a limit or the node ran out."""
    incident = _corpus(prefix)[index]
    assert incident.kind == "unknown" and incident.victims
    assert incident.recommendation is None


@pytest.mark.parametrize(
    ("prefix", "index", "kind"),
    [
        ("09", 0, "cpuset"),
        ("27", 0, "cpuset"),
        ("27", 1, "mempolicy"),
    ],
)
def test_no_limit_for_a_cpuset_or_numa_policy_kill(prefix: str, index: int, kind: str) -> None:
    incident = _corpus(prefix)[index]
    rec = incident.recommendation
    assert incident.kind == kind and rec is not None
    assert rec["action"] == "widen-numa-nodes" and rec["limit_will_not_help"] is True
    assert rec["memory_limit"] is None and "a memory limit does not change that" in rec["message"]


@pytest.mark.parametrize(("prefix", "index"), [("10", 1), ("33", 0), ("44", 1), ("49", 0)])
def test_no_recommendation_when_nothing_was_killed(prefix: str, index: int) -> None:
    """No killable process, or the kill line is not in the log: nothing to resize."""
    incident = _corpus(prefix)[index]
    assert incident.victim is None and incident.recommendation is None
    # corpus 10's report ends in a kernel panic: the verdict says that instead
    assert ("panicked" if prefix == "10" else "shows no kill") in verdict(incident)


def test_constraint_none_memcg_gets_memcg_advice_not_node_advice() -> None:
    """Corpus 63 (5.2-rc2, LKML): CONSTRAINT_NONE printed for a memcg OOM; trusting it would
    say 'raising the limit cannot help', the opposite of the right advice."""
    [incident] = _corpus("63")
    rec = incident.recommendation
    assert incident.kind == "memcg" and rec is not None and rec["action"] == "resize"
    assert rec["limit_will_not_help"] is False and "cannot help" not in rec["message"]


def test_the_verdict_calls_a_part_mostly_only_when_it_is_most() -> None:
    """Corpus 63: the stats itemize 304 KiB of kernel memory of the 1 MiB charged (anon and
    file 0): kernel memory is the largest part, not 'mostly', and 70 % is not itemized."""
    [incident] = _corpus("63")
    said = verdict(incident)
    assert "largest part kernel memory (30 %), 70 % not itemized" in said
    assert "mostly" not in said and "0 B" not in said
    [heap] = _corpus("02")[:1]
    assert "mostly heap (94 %)" in verdict(heap)


def test_a_cgroup_filled_by_kernel_memory_gets_no_larger_limit() -> None:
    """Corpus 12 (CentOS 7, 3.10): 3 GiB of kmem filled a pod whose processes held a few MiB;
    a limit sized from the usage would only give the kernel memory more room."""
    [incident] = _corpus("12")
    rec = incident.recommendation
    assert rec is not None and rec["action"] == "find-kernel-memory"
    assert rec["memory_limit_bytes"] is None and rec["limit_will_not_help"] is True
    assert "find what holds the kernel memory" in verdict(incident)


def test_no_memory_request_for_a_container_outside_kubernetes() -> None:
    """Corpus 73: a global kill of a plain Docker container (`/docker/<id>`): there is no
    scheduler to reserve a request for it; the advice says what it held, not a request."""
    [incident] = _corpus("73")
    rec = incident.recommendation
    assert rec is not None and rec["action"] == "relieve-node"
    assert rec["memory_request"] is None and "request to about" not in rec["message"]
    assert "held 192 MiB at the kill" in rec["message"]
