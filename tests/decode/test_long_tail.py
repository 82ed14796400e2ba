"""The long tail of real logs where the public corpus has no sample of its own:
journalctl in other locales and output formats, yearless stamps, page sizes other than
4 KiB, CONSTRAINT_NONE on memcg OOMs, and paste artifacts.

Lines are built the way the kernel, journalctl and a terminal print them; where a real
public log is quoted its source is named.
"""

from __future__ import annotations

from calendar import timegm

import pytest

from oomwatch.decode import Reference, decode_lines, decode_text, parse_lines
from oomwatch.decode.stamps import YearClock
from oomwatch.incident import Incident

KILL = (
    "Out of memory: Killed process 4242 (java) total-vm:8000000kB, anon-rss:6400000kB, "
    "file-rss:1000kB, shmem-rss:0kB, UID:1000 pgtables:13000kB oom_score_adj:0"
)
HEADER = (
    "java invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0,"
    " oom_score_adj=0"
)


def _one(lines: list[str], reference: Reference | None = None) -> Incident:
    incidents = decode_lines(lines, reference).incidents
    assert [i.to_dict() for i in decode_text("\n".join(lines), reference).incidents] == [
        i.to_dict() for i in incidents
    ]
    [incident] = incidents
    return incident


# journalctl prints `%b %d` of its locale (LC_TIME): lower case, other scripts, CJK.
@pytest.mark.parametrize(
    "month",
    ["Mar", "mar", "Mär", "mars", "févr.", "мар", "мая", "bře", "mrt", "3月", " 3月", "3월"],
)
def test_journalctl_in_any_locale_finds_the_kill_and_a_clean_invoker(month: str) -> None:
    prefix = f"{month} 05 10:00:01 node-1 kernel: "
    incident = _one([prefix + HEADER, prefix + KILL])
    assert incident.invoker is not None and incident.invoker.comm == "java"
    assert [(v.pid, v.comm) for v in incident.victims] == [(4242, "java")]
    assert incident.source_format == "journal" and incident.kind == "global"  # `05`: %d
    assert incident.wall_time is None and any("has no year" in n for n in incident.notes)


def test_unknown_month_name_still_strips_the_prefix() -> None:
    prefix = "xyz. 05 10:00:01 node-1 kernel: "
    incident = _one([prefix + HEADER, prefix + KILL])
    assert incident.invoker is not None and incident.invoker.comm == "java"
    assert incident.victims[0].pid == 4242


@pytest.mark.parametrize(
    ("prefix", "wall_time", "kernel_time_s"),
    [
        ("2021-05-30T12:29:02+0800 node-1 kernel: ", "2021-05-30T12:29:02+08:00", None),  # iso
        (
            "2021-05-30T12:29:02.123456+0800 node-1 kernel: ",
            "2021-05-30T12:29:02.123456+08:00",
            None,
        ),
        ("May 30 12:29:02.123456 node-1 kernel: ", None, None),  # short-precise
        ("[ 5120.654321] node-1 kernel: ", None, 5120.654321),  # short-monotonic
        ("[ 5120.654321] kernel: ", None, 5120.654321),  # short-monotonic --no-hostname
        ("Sun 2021-05-30 12:29:02 UTC node-1 kernel: ", "2021-05-30T12:29:02+00:00", None),
        ("1622377742.123456 node-1 kernel: ", "2021-05-30T12:29:02.123456+00:00", None),  # unix
    ],
)
def test_journalctl_output_formats(
    prefix: str, wall_time: str | None, kernel_time_s: float | None
) -> None:
    incident = _one([prefix + HEADER, prefix + KILL])
    assert incident.source_format == "journal"
    assert incident.invoker is not None and incident.invoker.comm == "java"
    assert (incident.wall_time, incident.kernel_time_s) == (wall_time, kernel_time_s)


def test_year_from_the_reference_time_and_said_so() -> None:
    """A syslog stamp has no year: the latest year that puts it before the reference."""
    ref = Reference(timegm((2024, 3, 5, 0, 0, 0)), "the file's modification time")
    incident = _one(["Aug 16 20:29:54 host kernel: " + KILL], ref)
    assert incident.wall_time == "2023-08-16T20:29:54"  # August 2024 is after the reference
    assert incident.year_inferred_from == "reference time"
    assert (
        "year 2023 inferred for 'Aug 16 20:29:54' from the file's modification time (2024-03-05)"
        in incident.notes
    )


def test_year_rolls_over_with_the_log() -> None:
    ref = Reference(timegm((2024, 1, 1, 12, 0, 0)))
    lines = [
        "Dec 31 23:59:58 host kernel: " + KILL,
        "Jan  1 00:00:03 host kernel: " + KILL.replace("4242", "4243"),
    ]
    incidents = decode_lines(lines, ref).incidents
    assert [i.wall_time for i in incidents] == ["2023-12-31T23:59:58", "2024-01-01T00:00:03"]


def test_year_from_the_journal_banner_without_a_reference() -> None:
    lines = [
        "-- Logs begin at Fri 2021-12-31 08:00:01 CET, end at Sat 2022-01-01 10:00:00 CET. --",
        *(f"Dec 31 2{i}:00:00 host kernel: chatter {i}" for i in range(3)),
        "Jan 01 09:59:59 host kernel: " + KILL,
    ]
    incident = _one(lines)
    assert incident.wall_time == "2022-01-01T09:59:59"
    assert incident.year_inferred_from == "journal banner"


def test_no_evidence_no_year_and_feb_29_only_in_a_leap_year() -> None:
    assert YearClock().date("Feb 29 10:00:00") is None
    dated = YearClock(Reference(timegm((2023, 6, 1, 0, 0, 0)))).date("Feb 29 10:00:00")
    assert dated is not None and dated.wall_time == "2020-02-29T10:00:00"


def test_constraint_none_with_a_memcg_context_is_a_memcg_oom() -> None:
    """Kernels 5.0-5.2 print CONSTRAINT_NONE for every OOM (corpus 47, 63 are real ones)."""
    lines = [
        "[10.0] " + HEADER,
        "[10.0] memory: usage 1048576kB, limit 1048576kB, failcnt 9",
        "[10.0] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
        "oom_memcg=/kubepods/pod1,task_memcg=/kubepods/pod1/c1,task=java,pid=4242,uid=1000",
        "[10.0] Memory cgroup out of memory: " + KILL.split(": ", 1)[1],
    ]
    incident = _one(lines)
    assert (incident.kind, incident.constraint) == ("memcg", "CONSTRAINT_NONE")
    assert any("oc->constraint not set until 5.3" in n for n in incident.notes)
    summary = lines[2].replace("oom_memcg=/kubepods/pod1", "global_oom")
    glob = _one([lines[0], summary, "[10.0] " + KILL])
    assert glob.kind == "global" and not any("CONSTRAINT_NONE" in n for n in glob.notes)


def _global_report(*meminfo: str, rows: tuple[str, ...] = (), kill: str = KILL) -> list[str]:
    return [
        "[20.0] " + HEADER,
        "[20.0] Mem-Info:",
        *(f"[20.0] {line}" for line in meminfo),
        "[20.0] Tasks state (memory values in pages):",
        "[20.0] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
        *(f"[20.0] {row}" for row in rows),
        "[20.0] " + kill,
    ]


def test_sparc64_8k_pages_from_the_buddy_lists() -> None:
    """Mem-Info of a sparc64 machine (stress-ng issue #177 prints `Normal free:...`; the
    order-0 block of its buddy lists is one 8 KiB page)."""
    incident = _one(
        _global_report(
            "active_anon:0 inactive_anon:0 isolated_anon:0",
            "Node 0 active_anon:0kB inactive_anon:0kB active_file:184kB inactive_file:240kB",
            "Node 0 Normal: 23*8kB (UME) 12*16kB (UME) 3*32kB (M) = 472kB",
            rows=("[ 4242]  1000  4242  1000000   800000  1040384        0             0 java",),
        )
    )
    assert incident.page_size_bytes == 8192
    assert any("pages are 8 KiB here" in n for n in incident.notes)


def test_64k_pages_from_show_mem_counts_against_kb() -> None:
    incident = _one(
        _global_report(
            "active_anon:100000 inactive_anon:2000 isolated_anon:0",
            " active_file:23 inactive_file:30 isolated_file:0",
            "Node 0 active_anon:6400000kB inactive_anon:128000kB active_file:1472kB"
            " inactive_file:1920kB",
        )
    )
    assert incident.page_size_bytes == 65536


def test_64k_pages_from_the_victims_row_found_by_tgid() -> None:
    """No show_mem (a memcg OOM): the kill line's kB against the row of the same process;
    the row is a thread of it (pid 4250, tgid 4242)."""
    rows = ("[ 4250]  1000  4242   125000   100016  1048576        0             0 java",)
    lines = [line for line in _global_report(rows=rows) if "Mem-Info" not in line]
    incident = _one(lines)
    assert incident.page_size_bytes == 65536
    assert incident.tasks[0].tgid == 4242


def test_4k_is_never_assumed_where_the_report_says_otherwise() -> None:
    from oomwatch.diagnosis.evidence import page_bytes

    rows = ("[ 4250]  1000  4242   125000   100016  1048576        0             0 java",)
    incident = _one([line for line in _global_report(rows=rows) if "Mem-Info" not in line])
    assert page_bytes(incident) == 65536
    unknown = _one(["[1.0] " + KILL])
    assert unknown.page_size_bytes is None and page_bytes(unknown) == 4096


def test_grep_separator_is_never_glued_to_a_line() -> None:
    """`grep -A/-B` prints `--` between groups; a long line before it is not wrapped."""
    row = "[20.0] [ 4242]  1000  4242  1000000   800000  1040384        0             0 java"
    incident = _one([*_global_report(rows=(row[7:],))[:-1], "--", "[20.0] " + KILL, "--"])
    assert [t.name for t in incident.tasks] == ["java"]
    glued = _one([*_global_report(rows=(row[7:] + "--",))])
    assert [t.name for t in glued.tasks] == ["java"]


@pytest.mark.parametrize("elision", ["...", "[...]", "(...snipped...)", "<snip>", "\u2026", "```"])
def test_elisions_and_fences_after_a_long_line_do_not_eat_it(elision: str) -> None:
    incident = _one(["[1.0] " + HEADER, elision, "[1.0] " + KILL, elision])
    assert incident.victims[0].pid == 4242 and incident.invoker is not None


def test_abridged_header_keeps_what_it_has() -> None:
    incident = _one(["[1.0] java invoked oom-killer: gfp_mask=0x201da, [...]", "[1.0] " + KILL])
    assert incident.invoker is not None
    assert (incident.invoker.comm, incident.invoker.gfp_mask, incident.invoker.order) == (
        "java",
        "0x201da",
        None,
    )
    assert any("abridged" in n for n in incident.notes)


def test_prose_about_the_killer_is_not_a_header() -> None:
    lines = ["Then the whole machine invoked oom-killer: again and again", "[1.0] " + KILL]
    incident = _one(lines)
    assert incident.invoker is None


def test_a_table_header_pasted_from_another_report_does_not_split_this_one() -> None:
    report = [
        "[30.0] " + HEADER,
        "[30.0] Tasks state (memory values in pages):",
        "[30.0] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
        "[30.0] [ 4242]  1000  4242  2000000  1600250 13312000        0             0 java",
        "[30.0] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
        "global_oom,task_memcg=/,task=java,pid=4242,uid=1000",
        "[30.0] " + KILL,
    ]
    other = [
        "[9999.5] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj"
        " name",
        "[9999.5] [ 7777]     0  7777     1000      500    65536        0             0 other",
    ]
    for pasted in ([*report[:4], *other, *report[4:]], [*report[:5], *other, report[5]]):
        incident = _one(pasted)
        assert incident.victims[0].pid == 4242 and incident.invoker is not None
        assert [t.pid for t in incident.tasks] == [4242], pasted
    same_time = [*report[:5], *(o.replace("9999.5", "30.0") for o in other), report[5]]
    incident = _one(same_time)
    assert [t.pid for t in incident.tasks] == [4242]
    assert any("another report's" in n for n in incident.notes)


def test_printk_dropped_prefix_is_not_part_of_the_record() -> None:
    incident = _one(["** 88 printk messages dropped ** [1.0] " + KILL])
    assert incident.victims[0].pid == 4242 and incident.kernel_time_s == 1.0


def test_a_zero_padded_day_is_journalctl() -> None:
    """journalctl prints `May 07` (strftime %d), syslog daemons `May  7` (RFC 3164)."""
    select = "kernel: Out of memory: Kill process 1 (R) score 31 or sacrifice child"
    (journal,) = parse_lines([f"May 07 21:43:54 doom {select}"])
    (syslog,) = parse_lines([f"May  7 21:43:54 doom {select}"])
    assert (journal.source_format, syslog.source_format) == ("journal", "syslog")


def test_memcg_oom_known_from_its_call_trace() -> None:
    """A header fragment whose stack runs through mem_cgroup_out_of_memory() is a memcg OOM;
    a `? ` frame (a stale guess of the unwinder) is no evidence."""
    header = "[  1.0] java invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0,"
    header += " oom_score_adj=0"
    for frame, kind in (
        ("[  1.1]  mem_cgroup_out_of_memory+0xb5/0xd0", "memcg"),
        ("[  1.1]  [<ffffffff81210213>] mem_cgroup_out_of_memory+0x2b3/0x300", "memcg"),
        ("[  1.1]  [<ffffffff81210213>] ? mem_cgroup_out_of_memory+0x2b3/0x300", "unknown"),
        ("[  1.1]  out_of_memory+0x105/0x510", "unknown"),
    ):
        (incident,) = decode_lines([header, frame]).incidents
        assert incident.kind == kind, frame
        assert incident.victims == []


def test_report_format_and_time_from_its_first_stamped_line() -> None:
    """A report whose first pasted line lost its stamp is still the log's format."""
    lines = [
        "Tasks state (memory values in pages):",
        "[88559.579211] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents"
        " oom_score_adj name",
        "[88559.580159] [4014327]  1000 4014327  7487214   162332  1966080        0"
        "           986 java",
        "[88559.580476] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
        "mems_allowed=0,oom_memcg=/a,task_memcg=/a,task=java,pid=4014327,uid=1000",
    ]
    (incident,) = decode_lines(lines).incidents
    assert (incident.source_format, incident.kernel_time_s) == ("dmesg", 88559.580476)
