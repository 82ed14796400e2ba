"""One real report in every `dmesg` output mode and stamp locale decodes to the same kill.

The fixtures are util-linux's own output (tests/data/dmesg-modes/README.md), so each prefix
is exactly what a user pastes: `-x`'s facility and level, `-H`'s relative stamps, `-d`'s
deltas, translated `-T` stamps, `--time-format=iso`'s comma.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oomwatch.decode import decode_lines, decode_text, parse_lines
from oomwatch.decode.stamps import ctime_stamp

MODES = Path(__file__).resolve().parent.parent / "data" / "dmesg-modes"
FILES = sorted(MODES.glob("*.txt"))
KILLED = (
    "Memory cgroup out of memory: Killed process 4242 (python) total-vm:1000kB, "
    "anon-rss:900kB, file-rss:10kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0"
)


def _wall(name: str) -> str | None:
    if "-T" in name:
        return "2026-11-23T21:06:04"
    if "iso" in name:
        return "2026-11-23T21:06:04.978445+00:00"
    return None


def _kernel_time(name: str) -> float | None:
    return (
        5175.978445
        if name.split("-", 1)[1]
        in {
            "default.txt",
            "d.txt",
            "r.txt",
            "x.txt",
            "x-d.txt",
            "buffer.txt",
        }
        else None
    )


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_mode_gives_the_whole_report(path: Path) -> None:
    result = decode_text(path.read_bytes())
    assert result.warnings == []
    (incident,) = result.incidents
    assert (incident.kind, incident.constraint) == ("memcg", "CONSTRAINT_MEMCG")
    assert incident.memcg is not None and incident.memcg.limit_bytes == 65536 * 1024
    assert incident.memcg.kmem_usage_bytes == 136 * 1024  # `kmem:` and `memory+swap:` start `word:`
    assert "memory+swap: usage 64 MiB, limit 64 MiB" in incident.notes
    assert incident.invoker is not None and incident.invoker.pid == 17782
    assert incident.oom_memcg is not None and incident.oom_memcg.endswith("5e1f")
    assert [(v.pid, v.comm, v.anon_rss_bytes) for v in incident.victims] == [
        (17782, "grower", 71808 * 1024)
    ]
    assert [t.name for t in incident.tasks] == ["grower"]
    assert incident.memcg_stats is not None and incident.memcg_stats["rss"] == 66969600
    assert incident.wall_time == _wall(path.name)
    assert incident.kernel_time_s == _kernel_time(path.name)
    text = path.read_text(encoding="utf-8")
    assert [i.to_dict() for i in decode_lines(text.split("\n")).incidents] == [incident.to_dict()]


def test_programs_records_in_the_kernel_log_are_dropped() -> None:
    """dmesg -r and -x show what programs wrote to /dev/kmsg; only the kernel's count."""
    for line in (
        f"<30>[ 5175.978301] systemd[1]: {KILLED}",
        f"daemon:info  : [ 5175.978301] systemd[1]: {KILLED}",
        f"user  :notice: {KILLED}",
    ):
        assert list(parse_lines([line])) == [], line
    (kept,) = parse_lines([f"kern  :err   : {KILLED}"])
    assert (kept.message, kept.level, kept.source_format) == (KILLED, 3, "dmesg")


def test_iso_lines_whose_message_starts_with_a_word_and_colon() -> None:
    """`dmesg --time-format=iso`'s comma stamp is never a syslog stamp: `memory:` is no tag."""
    usage = "memory: usage 524288kB, limit 524288kB, failcnt 42"
    (record,) = parse_lines([f"2024-03-01T10:00:00,123456+00:00 {usage}"])
    assert (record.message, record.wall_time) == (usage, "2024-03-01T10:00:00.123456+00:00")
    (old,) = parse_lines([f"2015-04-06T17:53:37,585621+0200 {usage}"])  # util-linux < 2.32
    assert old.message == usage


def test_hostless_stamp_keeps_report_lines_and_drops_programs() -> None:
    """Without a host, `stamp word: ...` is the kernel's only where it is a report line."""
    lines = [
        "2024-03-01T10:00:00.123+00:00 memory: usage 1024kB, limit 1024kB, failcnt 3",
        "Mar  1 10:00:00 oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
        "mems_allowed=0,oom_memcg=/a,task_memcg=/a,task=x,pid=7,uid=0",
        "2024-03-01T10:00:00.123+00:00 containerd: memory: usage 1kB, limit 2kB, failcnt 0",
        "2024-03-01T10:00:00.123+00:00 node-1 memory: usage 1kB, limit 2kB, failcnt 0",
    ]
    messages = [r.message for r in parse_lines(lines)]
    assert messages == [lines[0].split(" ", 1)[1], lines[1][16:]]


def test_caller_id_after_a_space_and_a_collectors_stamp() -> None:
    for line, when in (
        (f"[ 5175.978300] [  T1234] {KILLED}", (5175.9783, None)),
        (f"[Mon Nov 23 21:06:04 2026] [  T1234] {KILLED}", (None, "2026-11-23T21:06:04")),
        (f"kern  :err   : [ 5175.978300] [  T1234] {KILLED}", (5175.9783, None)),
        # kubectl logs --timestamps / a CRI log of a pod that prints the kernel log
        (
            f"2024-03-01T10:00:00.123456789Z [12345.678] {KILLED}",
            (12345.678, "2024-03-01T10:00:00.123456789Z"),
        ),
        (
            f"2024-03-01T10:00:00.123456789Z stdout F [ 12345.678] {KILLED}",
            (12345.678, "2024-03-01T10:00:00.123456789Z"),
        ),
        (f"[ 8341.856870 <    0.000012>] node-2 kernel: {KILLED}", (8341.85687, None)),
    ):
        (record,) = parse_lines([line])
        assert (record.message, (record.kernel_time_s, record.wall_time)) == (KILLED, when)


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("Mon Nov 23 21:06:04 2026", ("2026-11-23T21:06:04", None)),
        ("Mo, 23. Nov 2026, 21:06:04", ("2026-11-23T21:06:04", None)),  # de, 2.38+
        ("lun. 23 nov. 21:06:04 2026", ("2026-11-23T21:06:04", None)),  # fr
        ("mar 3 nov 10:00:00 2026", ("2026-11-03T10:00:00", None)),  # es: mar = martes
        ("11月23日(月) 21:06:04 2026", ("2026-11-23T21:06:04", None)),  # ja, 2.39+
        ("11월 23일 (월) 21:06:04", (None, "11월 23 21:06:04")),  # ko: no year
        ("mån 23 nov 2026 21.06.04", ("2026-11-23T21:06:04", None)),  # sv: dots
        ("пон. 23. нов. 2026. 21:06:04", ("2026-11-23T21:06:04", None)),  # sr
        ("Xyz Qqq  4 07:08:09 2025", (None, "Xyz Qqq  4 07:08:09 2025")),
        ("Nov23 21:06", None),  # reltime's minute: no seconds, no wall time
    ],
)
def test_ctime_stamp_layouts(stamp: str, expected: tuple[str | None, str | None] | None) -> None:
    assert ctime_stamp(stamp) == expected


def test_talosctl_dmesg_lines() -> None:
    """Talos has no dmesg: `talosctl dmesg` prints `<node>: <facility>: <level>: [<time>]: `."""
    cases = {
        f"10.200.70.91: kern:    info: [2025-06-04T04:51:57.572293906Z]: {KILLED}": (
            "2025-06-04T04:51:57.572293906+00:00"
        ),
        f"mc-pt1-pkp-srv-1a: kern:     err: [2025-09-13T20:46:45.2Z]: {KILLED}": (
            "2025-09-13T20:46:45.2+00:00"
        ),
        f" kern: warning: [2025-05-18T15:40:20.653515542Z]: {KILLED}"
        + " " * 40: "2025-05-18T15:40:20.653515542+00:00",
    }
    for line, wall in cases.items():
        (record,) = parse_lines([line])
        assert (record.message, record.wall_time) == (KILLED, wall)
        assert record.source_format == "dmesg-T"
    talos_oom_controller = (
        "user: warning: [2026-01-12T20:27:31.913975631Z]: [talos] Sending SIGKILL to cgroup "
        '{"component": "controller-runtime", "cgroup": "/sys/fs/cgroup/kubepods/burstable/x"}'
    )
    user = f"user: notice: [2026-01-12T20:27:31Z]: {KILLED}"
    assert list(parse_lines([talos_oom_controller, user])) == []


def test_paste_that_begins_inside_the_first_stamp() -> None:
    (record,) = parse_lines([f"41066.536886] {KILLED}"])
    assert (record.message, record.kernel_time_s, record.source_format) == (KILLED, None, "dmesg")
