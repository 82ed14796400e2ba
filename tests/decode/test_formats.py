"""Each log format the decoder auto-detects, line by line."""

from __future__ import annotations

from oomwatch.decode import LogRecord, decode_lines, decode_text, parse_kmsg_record, parse_lines

KILLED = (
    "Memory cgroup out of memory: Killed process 4242 (python) total-vm:1000kB, "
    "anon-rss:900kB, file-rss:10kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0"
)


def _one(line: str) -> LogRecord:
    records = list(parse_lines([line]))
    assert len(records) == 1, records
    return records[0]


# --- /dev/kmsg ----------------------------------------------------------------------------


def test_kmsg_record_fields() -> None:
    record = parse_kmsg_record(b"6,5095,7198883824,-;memory: usage 65536kB, limit 65536kB\n")
    assert record == LogRecord(
        message="memory: usage 65536kB, limit 65536kB",
        source_format="kmsg",
        kernel_time_s=7198.883824,
        kmsg_seq=5095,
        facility=0,
        level=6,
    )


def test_kmsg_rejects_userspace_and_garbage() -> None:
    assert parse_kmsg_record(b"14,99,1000,-;Killed process 1 (x) total-vm:1kB") is None
    assert parse_kmsg_record(b"") is None
    assert parse_kmsg_record(b"\xff\xfe garbage") is None
    assert parse_kmsg_record(b"6,1,2") is None


def test_kmsg_caller_field_flags_and_dictionary_lines() -> None:
    raw = b"3,77,1000000,c,caller=T12;Out of memory\n SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A03:00\n"
    record = parse_kmsg_record(raw)
    assert record is not None
    assert record.message == "Out of memory"
    assert record.level == 3 and record.kmsg_seq == 77


def test_kmsg_escapes() -> None:
    record = parse_kmsg_record(b"6,1,1,-;anon 1\\x0afile 2\\x0a back\\x5cslash \\xe2\\x82\\xac")
    assert record is not None
    assert record.message == "anon 1\nfile 2\n back\\slash \u20ac"


def test_kmsg_single_record_stats_dump_is_split() -> None:
    """5.3-6.1 print the whole memory.stat text in one record with \\x0a escapes."""
    records = [
        b"6,1,100,-;memory: usage 1024kB, limit 1024kB, failcnt 3",
        b"6,2,101,-;Memory cgroup stats for /job:",
        b"6,3,102,-;anon 1048576\\x0afile 4096\\x0ashmem 0\\x0aanon_thp 0\\x0apgfault 7\\x0a",
        b"6,4,103,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        b"oom_memcg=/job,task_memcg=/job,task=python,pid=4242,uid=0",
        b"3,5,104,-;" + KILLED.encode(),
    ]
    parsed = [parse_kmsg_record(r) for r in records]
    text = "\n".join(r.decode() for r in records)
    incident = decode_text(text).incidents[0]
    assert all(p is not None for p in parsed)
    assert incident.memcg_stats == {"anon": 1048576, "file": 4096, "shmem": 0, "anon_thp": 0}
    assert incident.breakdown_bytes is not None and incident.breakdown_bytes.anon == 1048576
    assert incident.kmsg_seq == 5 and incident.kernel_time_s == 0.000104


def test_pasted_kmsg_lines_skip_userspace_records() -> None:
    lines = ["12,40,1000,-;" + KILLED, "3,41,2000,-;" + KILLED.replace("4242", "4343")]
    incidents = decode_lines(lines).incidents
    assert [i.victims[0].pid for i in incidents] == [4343]


# --- dmesg ----------------------------------------------------------------------------------


def test_dmesg_with_caller_id_and_level() -> None:
    record = _one(f"<3>[ 1629.930998][T14021] {KILLED}")
    assert (record.source_format, record.kernel_time_s, record.level) == ("dmesg", 1629.930998, 3)
    assert record.message == KILLED
    assert _one(f"[    5.000001][    C0] {KILLED}").message == KILLED


def test_dmesg_t_locales() -> None:
    cases = {
        "[Tue Mar 11 10:16:36 2025]": "2025-03-11T10:16:36",
        "[二 9月  3 05:57:48 2024]": "2024-09-03T05:57:48",
        "[月  1月 26 01:49:41 2026]": "2026-01-26T01:49:41",
        "[Di Mär  4 07:08:09 2025]": "2025-03-04T07:08:09",
        "[화  3월 11 10:16:36 2025]": "2025-03-11T10:16:36",
    }
    for stamp, wall in cases.items():
        record = _one(f"{stamp} {KILLED}")
        assert (record.source_format, record.wall_time, record.message) == ("dmesg-T", wall, KILLED)


def test_dmesg_iso_time_format() -> None:
    record = _one(f"2024-05-01T10:00:01,123456+02:00 {KILLED}")
    assert (record.source_format, record.wall_time, record.message) == (
        "dmesg-T",
        "2024-05-01T10:00:01.123456+02:00",
        KILLED,
    )


def test_journal_short_monotonic() -> None:
    record = _one(f"[ 8341.856870] node-2 kernel: {KILLED}")
    assert (record.source_format, record.kernel_time_s, record.message) == (
        "journal",
        8341.85687,
        KILLED,
    )


def test_dmesg_t_unknown_month_keeps_the_stamp() -> None:
    record = _one(f"[Xyz Qqq  4 07:08:09 2025] {KILLED}")
    assert record.wall_time is None and record.time_text is not None
    assert "07:08:09" in record.time_text


# --- syslog and journal -------------------------------------------------------------------


def test_syslog_with_and_without_host() -> None:
    with_host = _one(f"Jun 24 18:49:43 node-2 kernel: [ 8341.856870] {KILLED}")
    no_host = _one(f"Jan  5 15:19:27 kernel: [ 5864.708608] {KILLED}")
    for record in (with_host, no_host):
        assert record.source_format == "syslog"
        assert record.message == KILLED
        assert record.wall_time is None  # no year: never guessed
    assert with_host.kernel_time_s == 8341.85687
    assert no_host.time_text == "Jan  5 15:19:27"


def test_syslog_drops_other_programs() -> None:
    lines = [
        "Jun 24 18:49:43 node-2 node-problem-detector[6018]: Message:" + KILLED,
        "Jun 24 18:49:43 node-2 containerd[2723]: " + KILLED,
    ]
    assert list(parse_lines(lines)) == []
    assert decode_lines(lines).incidents == []


def test_rfc3339_syslog_and_journal_short_iso() -> None:
    rfc = _one(f"2024-05-01T10:00:01.123456+02:00 node kernel: [ 10.5] {KILLED}")
    assert (rfc.source_format, rfc.wall_time) == ("syslog", "2024-05-01T10:00:01.123456+02:00")
    iso = _one(f"2021-06-13T14:21:19+0800 kubelet kernel: {KILLED}")
    assert (iso.source_format, iso.wall_time) == ("journal", "2021-06-13T14:21:19+08:00")


def test_journal_short_precise_and_continuation_lines() -> None:
    lines = [
        "Jun 13 14:21:19.050705 kubelet kernel: Memory cgroup stats for /mem_test:",
        "Jun 13 14:21:19.050705 kubelet kernel: anon 9842688",
        "                                       file 0",
        "                                       shmem 4096",
    ]
    records = list(parse_lines(lines))
    assert [r.message for r in records] == [
        "Memory cgroup stats for /mem_test:",
        "anon 9842688",
        "file 0",
        "shmem 4096",
    ]
    assert {r.source_format for r in records} == {"journal"}
    assert records[2].time_text == "Jun 13 14:21:19.050705"


# --- pasted text ----------------------------------------------------------------------------


def test_quoting_indentation_and_tmux_marker() -> None:
    assert _one(f"> > [ 1.000000] {KILLED}").message == KILLED
    assert _one(f"\t  [ 1.000000] {KILLED}").message == KILLED
    header = "main invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0"
    assert _one(f"[ 1.000000] {header}" + " " * 40 + "[7/972]").message == header


def test_hard_wrapped_line_is_joined() -> None:
    lines = [
        "[14808.063998] Memory cgroup stats for /docker/abc: cache:108KB rss:197168KB "
        "rss_huge:0KB mapped_file:4KB dirty:0KB writeback:0KB inactive_anon:0KB inacti",
        "ve_file:88KB active_file:4KB unevictable:0KB",
    ]
    records = list(parse_lines(lines))
    assert len(records) == 1
    assert records[0].message.endswith("inactive_file:88KB active_file:4KB unevictable:0KB")


def test_duplicated_paste_lines_count_once() -> None:
    block = [
        "[  9.000001] Task in /docker/x killed as a result of limit of /docker/x",
        "[  9.000002] memory: usage 204800kB, limit 204800kB, failcnt 4563",
    ]
    lines = [*block, *block, f"[  9.000003] {KILLED}"]
    incidents = decode_lines(lines).incidents
    assert len(incidents) == 1
    assert incidents[0].oom_memcg == "/docker/x" and incidents[0].memcg is not None


def test_plain_text_and_level_prefix() -> None:
    record = _one(f"<3>{KILLED}")
    assert (record.source_format, record.level, record.message) == ("plain", 3, KILLED)


def test_invalid_utf8_is_a_warning_not_an_error() -> None:
    data = b"[ 1.0] " + KILLED.encode() + b"\n\xff\xfe\xfd\n"
    result = decode_text(data)
    assert len(result.incidents) == 1
    assert any("UTF-8" in w for w in result.warnings)
