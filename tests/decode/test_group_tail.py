"""A memory.oom.group kill whose report the daemon closed in a pause of its input (0.1 s
quiet, on a loaded node) goes on as one incident, not one incident per later member (the
hour soak made 1,018 incidents of one 20,000-member kill: a pod's whole store share)."""

from __future__ import annotations

from support.kmsg import GROUP, group_kill

from oomwatch.decode import ReportAssembler
from oomwatch.incident import Incident


def decode_with_pauses(records: list[bytes], pauses: set[int]) -> list[Incident]:
    assembler = ReportAssembler()
    out: list[Incident] = []
    for i, raw in enumerate(records):
        out += assembler.feed_kmsg(raw)
        if i in pauses:
            out += assembler.flush()  # the daemon's idle flush
    return out + assembler.flush()


def test_members_after_a_pause_continue_the_group_kill() -> None:
    records = group_kill(3_000)
    incidents = decode_with_pauses(records, {1_000, 2_000})
    assert len(incidents) == 3  # one a pause, not one a member after it
    assert all(i.group_kill and i.task_memcg == GROUP for i in incidents)
    assert sum(i.kills_counted or 0 for i in incidents) == 3_001
    first, *rest = incidents
    assert not any("rest of the memory.oom.group" in n for n in first.notes)
    assert all(any("rest of the memory.oom.group" in n for n in i.notes) for i in rest)
    assert not any(i.header_suppressed for i in incidents)


def test_a_kill_after_a_gap_in_the_records_is_a_kill_of_its_own() -> None:
    """A kill line that does not come right after the group's last record (something was
    printed between, or lost) is not taken for a member."""
    records = group_kill(10)
    lone = b"3,999,9999,-;Memory cgroup out of memory: Killed process 777 (other) total-vm:1kB,"
    lone += b" anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0"
    incidents = decode_with_pauses([*records, lone], {len(records) - 1})
    assert len(incidents) == 2
    assert incidents[0].group_kill and not incidents[1].group_kill
    assert [v.pid for v in incidents[1].victims] == [777]


def test_a_kill_right_after_a_single_kill_is_not_made_a_group_member() -> None:
    records = group_kill(0)[:2]  # the summary and the kill line: no group line
    nxt = records[1].replace(b"3,2,101,", b"3,3,102,").replace(b"pid=2", b"pid=3")
    nxt = nxt.replace(b"process 2 (w2)", b"process 3 (w3)")
    incidents = decode_with_pauses([*records, nxt], {1})
    assert len(incidents) == 2 and not any(i.group_kill for i in incidents)
