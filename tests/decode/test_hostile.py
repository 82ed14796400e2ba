"""Names are chosen by whoever runs the process: they must never steer the parse."""

from __future__ import annotations

from oomwatch.decode import decode_lines, decode_text, parse_kmsg_record
from oomwatch.decode import lines as L

TAIL = ", anon-rss:5kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0"


def test_name_with_fake_total_vm() -> None:
    line = f"Out of memory: Killed process 5 (a) total-vm:1kB) total-vm:10kB{TAIL}"
    parsed = L.parse_killed(line)
    assert parsed is not None
    _, victim = parsed
    assert (victim.pid, victim.comm, victim.total_vm_bytes, victim.anon_rss_bytes) == (
        5,
        "a) total-vm:1kB",
        10 * 1024,
        5 * 1024,
    )


def test_name_with_fake_pid_and_uid_in_summary() -> None:
    line = (
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/a,task_memcg=/a,task=x,pid=1,uid=0,pid=4242,uid=1000"
    )
    summary = L.parse_oom_kill(line)
    assert summary is not None
    assert (summary.task, summary.pid, summary.uid, summary.task_memcg) == (
        "x,pid=1,uid=0",
        4242,
        1000,
        "/a",
    )


def test_name_with_fake_task_memcg_in_summary() -> None:
    line = (
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/real,task_memcg=/real/c,task=,task_memcg=/x,pid=7,uid=0"
    )
    summary = L.parse_oom_kill(line)
    assert summary is not None
    assert (summary.oom_memcg, summary.task_memcg, summary.task) == (
        "/real",
        "/real/c",
        ",task_memcg=/x",
    )


def test_newline_in_name_does_not_cut_the_kill_line() -> None:
    raw = (
        b"3,5,1000,-;Memory cgroup out of memory: Killed process 7 "
        b"(a\\x0aKilled process 1 (init) total-vm:1kB) total-vm:10kB" + TAIL.encode()
    )
    record = parse_kmsg_record(raw)
    assert record is not None
    [incident] = decode_text(raw.decode()).incidents
    [victim] = incident.victims
    assert victim.pid == 7
    assert victim.comm == "a\nKilled process 1 (init) total-vm:1kB"
    assert victim.total_vm_bytes == 10 * 1024


def test_header_text_inside_a_victim_name_is_not_a_header() -> None:
    line = (
        "[1.0] Out of memory: Killed process 5 (a invoked oom-killer: gfp_mask=0x0, order=0, "
        f"oom_score_adj=0) total-vm:10kB{TAIL}"
    )
    [incident] = decode_lines([line]).incidents
    assert incident.invoker is None
    assert incident.victims[0].comm.startswith("a invoked oom-killer")


def test_invoker_named_like_a_summary_line() -> None:
    line = (
        "[1.0] oom-kill:x invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
    )
    [incident] = decode_lines([line]).incidents
    assert incident.invoker is not None and incident.invoker.comm == "oom-kill:x"
    assert incident.constraint is None and incident.victims == []


def test_task_row_name_with_digits_and_spaces() -> None:
    lines = [
        "[1.0] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
        "[1.0] [    42]     0    42      100       10    4096        0             0 1 2 3 x",
        f"[1.1] Out of memory: Killed process 42 (1 2 3 x) total-vm:400kB{TAIL}",
    ]
    [incident] = decode_lines(lines).incidents
    assert incident.tasks[0].name == "1 2 3 x"
    assert not any("task table names" in note for note in incident.notes)


def test_control_characters_are_escaped_in_notes() -> None:
    lines = [
        "[1.0] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
        "[1.0] [    42]     0    42      100       10    4096        0             0 \x1b[31mred",
        f"[1.1] Out of memory: Killed process 42 (other\x1b]0;x\x07) total-vm:400kB{TAIL}",
    ]
    [incident] = decode_lines(lines).incidents
    note = next(n for n in incident.notes if "task table names" in n)
    assert "\x1b" not in note and "\x07" not in note and "\\x1b" in note


def test_userspace_kmsg_write_cannot_forge_a_kill() -> None:
    forged = b"12,100,5000,-;Memory cgroup out of memory: Killed process 1 (init) total-vm:1kB"
    assert parse_kmsg_record(forged) is None
    assert decode_text(forged).incidents == []


def test_other_programs_in_syslog_cannot_forge_a_kill() -> None:
    line = f"Jun 24 18:49:43 node evil[66]: [1.0] Out of memory: Killed process 1 (init){TAIL}"
    assert decode_lines([line]).incidents == []


def test_continuation_lines_of_other_programs_stay_theirs() -> None:
    lines = [
        "Jun 24 18:49:43 node evil[66]: hello",
        f"                               [1.0] Out of memory: Killed process 1 (init) "
        f"total-vm:10kB{TAIL}",
        "                               Memory cgroup out of memory: Killed process 1 (init)",
        "Jun 24 18:49:44 node kernel: eth0: link up",
    ]
    assert decode_lines(lines).incidents == []


def test_application_text_quoting_a_kill_line_is_not_a_kill() -> None:
    lines = [
        f"app [1.0] Out of memory: Killed process 1 (init) total-vm:10kB{TAIL}",
        f"worker-3: Killed process 1 (init) total-vm:10kB{TAIL}",
        f"2024-01-01 12:00:00 app: [ 1.000000] Killed process 1 (init) total-vm:10kB{TAIL}",
    ]
    assert decode_lines(lines).incidents == []
    assert decode_text("\n".join(lines)).incidents == []
