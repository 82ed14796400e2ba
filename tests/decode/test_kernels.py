"""Every kernel generation's OOM report lines, and how reports become incidents."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.decode import (
    ReportAssembler,
    decode_kmsg_records,
    decode_lines,
    decode_text,
    parse_kmsg_record,
)
from oomwatch.decode import lines as L
from oomwatch.decode.tasks import parse_header, parse_row
from oomwatch.incident import Incident

REAL_KMSG = Path(__file__).parent / "data" / "real-6.18-memcg-v1-hostile-comm.kmsg"


def _decode_kmsg(path: Path) -> list[Incident]:
    assembler = ReportAssembler()
    incidents: list[Incident] = []
    for raw in path.read_bytes().splitlines():
        record = parse_kmsg_record(raw)
        if record is not None:
            incidents.extend(assembler.feed(record))
    return incidents + assembler.flush()


def test_real_6_18_report_from_this_machine() -> None:
    """A kill provoked here (kernel 6.18, cgroup v1): v1 stats one record per line, 6.8+ table."""
    [incident] = _decode_kmsg(REAL_KMSG)
    assert incident.kind == "memcg" and incident.constraint == "CONSTRAINT_MEMCG"
    assert incident.oom_memcg == incident.task_memcg == "/oomwatch-decoder-24439"
    assert incident.invoker is not None
    assert (incident.invoker.comm, incident.invoker.pid) == ("hog x) total-vm", 24480)
    assert incident.memcg is not None
    assert (incident.memcg.usage_bytes, incident.memcg.limit_bytes, incident.memcg.failcnt) == (
        65536 * 1024,
        65536 * 1024,
        19,
    )
    assert incident.memcg.kmem_usage_bytes == 128 * 1024
    assert incident.memcg_stats is not None
    assert incident.memcg_stats["total_rss"] == 66977792
    assert "pgfault" not in incident.memcg_stats  # an event count, not bytes
    assert incident.breakdown_bytes is not None
    assert (incident.breakdown_bytes.anon, incident.breakdown_bytes.kernel) == (66977792, 131072)
    [row] = incident.tasks
    assert (row.pid, row.name, row.rss_anon_pages, row.pgtables_bytes) == (
        24480,
        "hog x) total-vm",
        18048,
        196608,
    )
    [victim] = incident.victims
    assert (victim.pid, victim.comm, victim.anon_rss_bytes, victim.file_rss_bytes) == (
        24480,
        "hog x) total-vm",
        72192 * 1024,
        6572 * 1024,
    )
    assert (incident.kmsg_seq, incident.kernel_time_s) == (5145, 7198.884038)
    assert not incident.header_suppressed


@pytest.mark.parametrize(
    ("line", "gfp", "order", "adj"),
    [
        ("java invoked oom-killer: gfp_mask=0xd0, order=0, oom_score_adj=-998", "0xd0", 0, -998),
        (
            "prometheus invoked oom-killer: gfp_mask=0x24201ca(GFP_HIGHUSER_MOVABLE|__GFP_COLD), "
            "nodemask=0-1, order=0, oom_score_adj=179",
            "0x24201ca(GFP_HIGHUSER_MOVABLE|__GFP_COLD)",
            0,
            179,
        ),
        (  # 4.14: pr_cont pieces, two spaces before order
            "x y invoked oom-killer: gfp_mask=0x14200ca(GFP_HIGHUSER_MOVABLE), nodemask=(null),"
            "  order=3, oom_score_adj=0",
            "0x14200ca(GFP_HIGHUSER_MOVABLE)",
            3,
            0,
        ),
        ("sh invoked oom-killer: gfp_mask=0xd0, order=1, oom_adj=0, oom_score_adj=5", "0xd0", 1, 5),
        ("rsyslogd invoked oom-killer: gfp_mask=0xd0, order=1, oomkilladj=0", "0xd0", 1, None),
        ("a invoked oom-killer: gfp_mask=0x0(), order=0, oom_score_adj=0", "0x0()", 0, 0),
    ],
)
def test_invoked_header_every_version(line: str, gfp: str, order: int, adj: int | None) -> None:
    parsed = L.parse_invoked(line)
    assert parsed is not None
    invoker, _ = parsed
    assert (invoker.gfp_mask, invoker.order, invoker.oom_score_adj) == (gfp, order, adj)
    assert invoker.comm == line.split(" invoked ")[0]


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        (  # 3.10 / 4.4
            "Killed process 29816 (jshell) total-vm:44050084kB, anon-rss:348936kB, "
            "file-rss:28392kB",
            (None, 29816, "jshell", 44050084, 348936, 28392, None, None, None, None),
        ),
        (  # 4.9 - 5.0
            "Killed process 1221 (allocate) total-vm:2257144kB, anon-rss:2009128kB, file-rss:4kB, "
            "shmem-rss:0kB",
            (None, 1221, "allocate", 2257144, 2009128, 4, 0, None, None, None),
        ),
        (  # 5.1 - 5.3
            "Out of memory: Killed process 7 (a b) total-vm:10kB, anon-rss:5kB, file-rss:1kB, "
            "shmem-rss:2kB",
            ("Out of memory", 7, "a b", 10, 5, 1, 2, None, None, None),
        ),
        (  # 5.4+
            "Memory cgroup out of memory: Killed process 68061 (stress) total-vm:4195088kB, "
            "anon-rss:2884696kB, file-rss:288kB, shmem-rss:0kB, UID:0 pgtables:5696kB "
            "oom_score_adj:872",
            (
                "Memory cgroup out of memory",
                68061,
                "stress",
                4195088,
                2884696,
                288,
                0,
                0,
                5696,
                872,
            ),
        ),
        (  # 2.6.3x (RHEL 6)
            "Killed process 2290, UID 27, (mysqld) total-vm:1000kB, anon-rss:800kB, file-rss:20kB",
            (None, 2290, "mysqld", 1000, 800, 20, None, 27, None, None),
        ),
        ("Killed process 19776 (VirtualBox)", (None, 19776, "VirtualBox") + (None,) * 7),
        (  # 2.6.18
            "Out of memory: Killed process 3412 (java).",
            ("Out of memory", 3412, "java") + (None,) * 7,
        ),
        (
            "Out of memory (oom_kill_allocating_task): Killed process 6 (sleep) total-vm:1kB",
            ("Out of memory (oom_kill_allocating_task)", 6, "sleep", 1) + (None,) * 6,
        ),
    ],
)
def test_killed_line_every_version(line: str, fields: tuple[object, ...]) -> None:
    """`fields` in kB as the line prints them; the victim holds bytes."""
    parsed = L.parse_killed(line)
    assert parsed is not None
    message, v = parsed
    kb = [
        None if b is None else b // 1024
        for b in (v.total_vm_bytes, v.anon_rss_bytes, v.file_rss_bytes, v.shmem_rss_bytes)
    ]
    pgtables = None if v.pgtables_bytes is None else v.pgtables_bytes // 1024
    assert (message, v.pid, v.comm, *kb, v.uid, pgtables, v.oom_score_adj) == fields


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=c.scope,mems_allowed=0-1,"
            "oom_memcg=/kubepods.slice,task_memcg=/kubepods.slice/c.scope,task=bash,pid=7,uid=0",
            (
                "CONSTRAINT_MEMCG",
                "c.scope",
                "/kubepods.slice",
                False,
                "/kubepods.slice/c.scope",
                "bash",
                7,
                0,
            ),
        ),
        (  # no cpusets (CONFIG_CPUSETS=n), global OOM
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),global_oom,task_memcg=/,"
            "task=x,pid=9,uid=1",
            ("CONSTRAINT_NONE", None, None, True, "/", "x", 9, 1),
        ),
        (  # no memcg at all (CONFIG_MEMCG=n)
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
            "task=dbus-daemon,pid=454,uid=101",
            ("CONSTRAINT_NONE", "/", None, False, None, "dbus-daemon", 454, 101),
        ),
        (  # RHEL 7 backport with an empty constraint
            "oom-kill:,cpuset=abc,mems_allowed=0-1,oom_memcg=/kubepods/p,task_memcg=/kubepods/p/c,"
            "task=runc:[2:INIT],pid=12800,uid=0",
            (None, "abc", "/kubepods/p", False, "/kubepods/p/c", "runc:[2:INIT]", 12800, 0),
        ),
        (  # mempolicy with a node list containing a comma
            "oom-kill:constraint=CONSTRAINT_MEMORY_POLICY,nodemask=0,2,cpuset=vcpu1,"
            "mems_allowed=0,2,global_oom,task_memcg=/machine,task=qemu,pid=5,uid=107",
            ("CONSTRAINT_MEMORY_POLICY", "vcpu1", None, True, "/machine", "qemu", 5, 107),
        ),
    ],
)
def test_oom_kill_summary_variants(line: str, expected: tuple[object, ...]) -> None:
    s = L.parse_oom_kill(line)
    assert s is not None
    assert (
        s.constraint,
        s.cpuset,
        s.oom_memcg,
        s.global_oom,
        s.task_memcg,
        s.task,
        s.pid,
        s.uid,
    ) == expected


@pytest.mark.parametrize(
    ("header", "row", "expected"),
    [
        (
            "[ pid ]   uid  tgid total_vm      rss nr_ptes swapents oom_score_adj name",
            "[28438]     0 28438  5063909   119961    1661   136409          -998 java",
            dict(
                pid=28438,
                total_vm_pages=5063909,
                rss_pages=119961,
                swapents_pages=136409,
                oom_score_adj=-998,
                pgtables_bytes=None,
                name="java",
            ),
        ),
        (
            "[ pid ]   uid  tgid total_vm      rss nr_ptes nr_pmds swapents oom_score_adj name",
            "[10517]     0 10517    74852     4784      32       5        0             0 go run",
            dict(pid=10517, rss_pages=4784, swapents_pages=0, name="go run"),
        ),
        (
            "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
            "[  26841]  1000 26841   234087    37516  1355776        0           999 npm start",
            dict(pid=26841, uid=1000, pgtables_bytes=1355776, oom_score_adj=999, name="npm start"),
        ),
        (
            "[  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes "
            "swapents oom_score_adj name",
            "[1234567]   104 1234567  1207814   762501   761861      640         0  6586368"
            "        0             0 a  b",
            dict(
                pid=1234567,
                rss_anon_pages=761861,
                rss_file_pages=640,
                rss_shmem_pages=0,
                pgtables_bytes=6586368,
                name="a  b",
            ),
        ),
    ],
)
def test_task_table_every_layout(header: str, row: str, expected: dict[str, object]) -> None:
    columns = parse_header(header)
    assert columns is not None
    parsed = parse_row(row, columns)
    assert parsed is not None
    for key, value in expected.items():
        assert getattr(parsed, key) == value, key


def _full_report(n: int) -> list[str]:
    t = 100.0 + n * 0.1
    return [
        f"[{t:.6f}] hog invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        f"[{t:.6f}] memory: usage 65536kB, limit 65536kB, failcnt {n}",
        f"[{t:.6f}] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        f"oom_memcg=/burst/c{n},task_memcg=/burst/c{n},task=hog,pid={1000 + n},uid=0",
        f"[{t + 0.00001:.6f}] Memory cgroup out of memory: Killed process {1000 + n} (hog) "
        "total-vm:82356kB, anon-rss:72192kB, file-rss:6708kB, shmem-rss:0kB, UID:0 pgtables:200kB "
        "oom_score_adj:0",
    ]


def test_rate_limited_burst_bare_kill_lines_are_their_own_incidents() -> None:
    """In the live kernel log (kmsg records) a kill without its header was rate-limited."""
    lines = [line for n in range(10) for line in _full_report(n)]
    for n in range(10, 16):
        lines.append(_full_report(n)[-1])  # the header of these was rate limited
    raws = [f"6,{i},{i},-;{line.split('] ', 1)[1]}".encode() for i, line in enumerate(lines)]
    incidents = decode_kmsg_records(raws).incidents
    assert len(incidents) == 16
    assert [i.header_suppressed for i in incidents] == [False] * 10 + [True] * 6
    assert [i.victims[0].pid for i in incidents] == list(range(1000, 1016))
    assert incidents[3].oom_memcg == "/burst/c3" and incidents[12].oom_memcg is None
    assert all(i.kind == "memcg" for i in incidents)


def test_saved_log_says_rate_limited_only_where_the_kernel_did() -> None:
    """A saved or pasted log may be cut or filtered: a bare kill line proves nothing until the
    kernel's own `oom_kill_process: N callbacks suppressed` line (lib/ratelimit.c) says so,
    and then only for the kills of that ratelimit interval since the last full report."""
    lines = [line for n in range(10) for line in _full_report(n)]
    lines += [_full_report(n)[-1] for n in range(10, 16)]
    without = decode_lines(lines).incidents
    assert [i.header_suppressed for i in without] == [False] * 16
    assert "the log alone does not say which" in without[12].notes[-1]
    lines.append("[107.5] oom_kill_process: 6 callbacks suppressed")
    lines += _full_report(75)  # the next report the ratelimit lets through
    said = decode_lines(lines).incidents
    assert [i.header_suppressed for i in said] == [False] * 10 + [True] * 6 + [False]
    assert "oom_kill_process: 6 callbacks suppressed" in said[12].notes[-1]
    assert [i.to_dict() for i in decode_text("\n".join(lines)).incidents] == [
        i.to_dict() for i in said
    ]


def test_callbacks_suppressed_counts_only_its_own_interval() -> None:
    """Only kills since the last full report and within one ratelimit interval (5 s) of the
    last bare kill are counted; other functions' suppressed callbacks say nothing."""
    bare = [_full_report(n)[-1] for n in range(4)]
    lines = [
        bare[0].replace("[100.000010]", "[80.0]"),  # 20 s earlier: another interval
        bare[1],
        "[100.3] __alloc_pages_slowpath: 27287 callbacks suppressed",
        "[101.0] oom_kill_process: 9 callbacks suppressed",
    ]
    incidents = decode_lines(lines).incidents
    assert [i.header_suppressed for i in incidents] == [False, True]
    lines = [*_full_report(0), bare[1], bare[2], "[101.0] oom_kill_process: 1 callbacks suppressed"]
    incidents = decode_lines(lines).incidents
    assert [i.header_suppressed for i in incidents] == [False, False, True]


def test_group_kill_is_one_incident_and_reaper_fills_member() -> None:
    lines = [
        *_full_report(0)[:3],
        "[100.1] Memory cgroup out of memory: Killed process 1000 (hog) total-vm:1kB, "
        "anon-rss:900kB, file-rss:0kB, shmem-rss:0kB",
        "[100.2] Tasks in /burst/c0 are going to be killed due to memory.oom.group set",
        "[100.3] Memory cgroup out of memory: Killed process 1001 (side car) total-vm:1kB, "
        "anon-rss:5kB, file-rss:0kB, shmem-rss:0kB",
        "[100.4] Memory cgroup out of memory: Killed process 1000 (hog) total-vm:1kB, "
        "anon-rss:900kB, file-rss:0kB, shmem-rss:0kB",
        "[100.5] oom_reaper: reaped process 1001 (side car), now anon-rss:0kB, file-rss:0kB, "
        "shmem-rss:0kB",
    ]
    [incident] = decode_lines(lines).incidents
    assert incident.group_kill and incident.group_cgroup == "/burst/c0"
    assert [(v.pid, v.comm) for v in incident.victims] == [(1000, "hog"), (1001, "side car")]
    assert incident.victims[1].reaped_anon_rss_bytes == 0
    assert incident.kernel_time_s == 100.1


def test_invocation_without_kill() -> None:
    lines = [
        "[5.0] nfsd invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "[5.0] Mem-Info:",
        "[5.1] Out of memory and no killable processes...",
    ]
    [incident] = decode_lines(lines).incidents
    assert incident.victims == [] and incident.kind == "global"
    assert any("no killable" in note for note in incident.notes)


def test_kill_select_old_wordings() -> None:
    for line in (
        "Out of Memory: Kill process 3412 (java) score 9126 and children.",
        "Out of memory: kill process 19735 (VBoxSVC) score 2136105 or a child",
        "Memory cgroup out of memory: Kill process 12800 (runc:[2:INIT]) score 997 or sacrifice"
        " child",
    ):
        parsed = L.parse_kill_select(line)
        assert parsed is not None, line
        assert parsed[2] in ("java", "VBoxSVC", "runc:[2:INIT]")


def test_2_6_18_kill_is_global() -> None:
    lines = [
        "[9.0] Out of Memory: Kill process 3412 (java) score 9126 and children.",
        "[9.0] Out of memory: Killed process 3412 (java).",
    ]
    [incident] = decode_lines(lines).incidents
    assert incident.kind == "global" and incident.victims[0].pid == 3412


def test_memory_limit_reached_without_task() -> None:
    task_in = L.parse_task_in("Memory limit reached of cgroup /kubepods/pod1")
    assert task_in == (None, "/kubepods/pod1")


def test_streaming_assembler_emits_when_next_report_starts() -> None:
    assembler = ReportAssembler()
    first = [
        parse_kmsg_record(f"6,{i},{i},-;{m}".encode())
        for i, m in enumerate(
            [
                "a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
                "Memory cgroup out of memory: Killed process 5 (a) total-vm:1kB, anon-rss:1kB, "
                "file-rss:0kB, shmem-rss:0kB",
            ]
        )
    ]
    emitted: list[Incident] = []
    for record in first:
        assert record is not None
        emitted += assembler.feed(record)
    assert emitted == [] and assembler.open
    chatter = parse_kmsg_record(b"6,9,9,-;eth0: link up")
    assert chatter is not None and assembler.feed(chatter) == []
    nxt = parse_kmsg_record(
        b"4,10,10,-;b invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
    )
    assert nxt is not None
    done = assembler.feed(nxt)
    assert [i.victims[0].pid for i in done] == [5]
    rest = assembler.flush()
    assert len(rest) == 1 and rest[0].victims == [] and not assembler.open


def test_report_gap_splits_unrelated_lines() -> None:
    lines = [
        "[10.0] a invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "[500.0] Out of memory: Killed process 5 (b) total-vm:1kB, anon-rss:1kB, file-rss:0kB",
    ]
    incidents = decode_lines(lines).incidents
    assert len(incidents) == 2
    assert incidents[0].victims == [] and not incidents[1].header_suppressed
