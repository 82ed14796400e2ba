"""The prefixes util-linux `dmesg` prints before a kernel message, in every output mode.

    [ 5175.978300] msg                                default
    <4>[ 5175.978300] msg                             -r (priority: facility << 3 | level)
    [ 5175.978300 <    0.000004>] msg                 -d
    [<    0.000004>] msg                              --time-format=delta
    [Mon Nov 23 21:06:04 2026] msg                    -T (layout and names per locale)
    [Mon Nov 23 21:06:04 2026 <    0.000004>] msg     -T -d
    [Nov23 21:06] msg, then [  +0.000004] msg        -H, --time-format=reltime
    2026-11-23T21:06:04,978300+00:00 msg              --time-format=iso
    msg                                               -t, --time-format=notime
    kern  :warn  : <any of the above>                 -x (facility and level by name)
    [ 5175.978300] [  T1234] msg                      caller id (util-linux >= 2.39)
    [ 5175.978300][ T1234] msg                        ... as the syslog(2) buffer prints it

(sys-utils/dmesg.c, print_record()).  journalctl's `short-monotonic` and `short-delta`
lines start the same way, followed by `host kernel: `.  Only a record of the kernel's
facility is a kernel message: `-r` and `-x` also show what programs wrote to /dev/kmsg
(systemd's `daemon:info`, `<30>`), which is dropped like another program's syslog line.
A `-x` or ISO line's message may start with `word:` (`memory: usage ...`): nothing after a
dmesg prefix is a syslog tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.decode.records import LogRecord
from oomwatch.decode.stamps import ctime_stamp, iso_offset

# util-linux's facility and level names, printed `%-6s:%-6s: ` by -x.
_FACILITY_LEVEL = lazy_compile(
    r"(kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|res[0-3]|local[0-7])"
    r" {0,6}:(emerg|alert|crit|err|warn|notice|info|debug) {0,6}: ?"
)
_LEVELS = {
    name: number
    for number, name in enumerate(
        ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")
    )
}
_PRIORITY = lazy_compile(r"<(\d{1,3})>")
_DELTA = r"<\s*-?\d{1,12}[.,]\d{1,9}\s*>"
# (journalctl -o short-delta pads the first entry's empty delta with blanks.)
_NUMERIC = lazy_compile(rf"\[\s*(\d{{1,12}}\.\d{{1,9}})(?:\s+{_DELTA})?\s*\]")
# --time-format=delta, and reltime's lines after the first of a minute.
_RELATIVE = lazy_compile(rf"\[(?:{_DELTA}|\s*[+-]\d{{1,12}}[.,]\d{{1,9}})\]")
# ctime (`-T`, with `-d` its delta) and reltime's first line of a minute (`[Nov23 21:06]`,
# `[23. Nov 21:06]`, `[11月23日 21:06]`): a clock inside, no pid-like column.
_BRACKETED = lazy_compile(rf"\[([^\[\]<>]{{5,64}}?)(?:\s+{_DELTA})?\]")
_MINUTE = lazy_compile(r".{0,30}\D.{0,30}\s\d{2}[:.]\d{2}\s*")
# `--time-format=iso`: always a comma before the microseconds (ISO_TIMESTAMP_COMMA_T), which
# no syslog daemon or journalctl prints, so it is never taken for an RFC 3339 syslog stamp.
_ISO = lazy_compile(r"(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2}),(\d{1,9})([+-]\d{2}:?\d{2}|Z)?")
_CALLER = lazy_compile(r" ?\[\s*[TC]\d{1,10}\]")
# Talos Linux has no dmesg: `talosctl dmesg` prints machined's `%s: %7s: [%s]: %s` (facility,
# priority right-aligned, RFC 3339 nanoseconds, message) after the node's name
# (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go, Dmesg).
_TALOS = lazy_compile(
    r"(?:[^\s:]{1,255}: )?(kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp"
    r"|local[0-7]): {1,7}(emerg|alert|crit|err|warning|warn|notice|info|debug): "
    r"\[(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})\]: ?"
)
# `journalctl -o short-monotonic` (and short-delta): [ 1234.567890] host kernel: <message>
_MONOTONIC_KERNEL = re.compile(r"(?:\S{1,255} )?kernel: ")
# A paste that begins inside the first line's stamp (`41066.536886] msg`): its time is cut.
_CUT_NUMERIC = lazy_compile(r"\d{0,12}\.\d{1,9}\](?: ?\[\s*[TC]\d{1,10}\])? ")


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a dmesg prefix said: where the message starts and the times it carried."""

    end: int
    kernel_time_s: float | None = None
    wall_time: str | None = None
    time_text: str | None = None  # a stamp kept as printed (no year, unknown month)
    level: int | None = None
    foreign: bool = False  # a program's record, not the kernel's


def dmesg_stamp(s: str) -> Stamp | None:
    """The dmesg prefix at the start of `s`; None when `s` has none.

    A bare `<N>` with nothing after it is left to the caller (a plain line's level).
    """
    pos, level = 0, None
    first = s[:1]
    if first != "[" and "]: " in s[:320]:
        talos = _TALOS.match(s)
        if talos is not None:
            return _talos(talos)
    if "a" <= first <= "u":
        decoded = _FACILITY_LEVEL.match(s)
        if decoded is None:
            return None
        if decoded.group(1) != "kern":
            return Stamp(decoded.end(), foreign=True)
        pos, level = decoded.end(), _LEVELS[decoded.group(2)]
    elif first == "<":
        raw = _PRIORITY.match(s)
        if raw is None:
            return None
        priority = int(raw.group(1))
        if priority > 7:
            return Stamp(raw.end(), foreign=True)
        pos, level = raw.end(), priority
    if first.isdigit():
        cut = _CUT_NUMERIC.match(s)
        if cut is not None:
            return Stamp(cut.end())
    stamp = _time(s, pos, level)
    if stamp is None:
        return Stamp(pos, level=level) if first != "<" and pos else None
    caller = _CALLER.match(s, stamp.end)
    if caller is not None:
        return Stamp(caller.end(), stamp.kernel_time_s, stamp.wall_time, stamp.time_text, level)
    return stamp


def _time(s: str, pos: int, level: int | None) -> Stamp | None:
    """The time field at `pos` in any of dmesg's --time-format layouts."""
    lead = s[pos : pos + 1]
    if lead.isdigit():
        iso = _ISO.match(s, pos)
        if iso is None:
            return None
        wall = f"{iso.group(1)}T{iso.group(2)}.{iso.group(3)}{iso_offset(iso.group(4))}"
        return Stamp(iso.end(), wall_time=wall, level=level)
    if lead != "[":
        return None
    numeric = _NUMERIC.match(s, pos)
    if numeric is not None:
        return Stamp(numeric.end(), float(numeric.group(1)), level=level)
    relative = _RELATIVE.match(s, pos)
    if relative is not None:
        return Stamp(relative.end(), level=level)
    bracketed = _BRACKETED.match(s, pos)
    if bracketed is None:
        return None
    when = ctime_stamp(bracketed.group(1))
    if when is not None:
        return Stamp(bracketed.end(), None, when[0], when[1], level)
    if _MINUTE.fullmatch(bracketed.group(1)):
        return Stamp(bracketed.end(), level=level)
    return None


def _talos(m: re.Match[str]) -> Stamp:
    if m.group(1) != "kern":
        return Stamp(m.end(), foreign=True)
    fraction = f".{m.group(5)}" if m.group(5) else ""
    wall = f"{m.group(3)}T{m.group(4)}{fraction}{'+00:00' if m.group(6) == 'Z' else m.group(6)}"
    level = 4 if m.group(2) == "warning" else _LEVELS[m.group(2)]
    return Stamp(m.end(), wall_time=wall, level=level)


def dmesg_record(
    stamp: Stamp, s: str, line_no: int | None, outer_wall: str | None = None
) -> LogRecord:
    """The kernel record of line `s` after its (not foreign) `stamp`; `outer_wall`: the
    stamp of a log that carried the dmesg line (a collector's, a CRI log's)."""
    if stamp.wall_time or stamp.time_text:
        return LogRecord(
            s[stamp.end :].strip(),
            "dmesg-T",
            kernel_time_s=stamp.kernel_time_s,
            wall_time=stamp.wall_time,
            level=stamp.level,
            line_no=line_no,
            time_text=stamp.time_text,
        )
    return numeric_record(s, stamp.end, stamp.kernel_time_s, stamp.level, line_no, outer_wall)


def numeric_record(
    s: str,
    end: int,
    kernel_time_s: float | None,
    level: int | None,
    line_no: int | None,
    outer_wall: str | None = None,
) -> LogRecord:
    """The record of a line whose dmesg prefix ends at `end` and carries no wall clock
    (the hot path: `[ 1234.567890] msg`); journalctl -o short-monotonic's `host kernel: `
    after the stamp makes it a journal line."""
    body = s[end:].strip()
    monotonic = (
        _MONOTONIC_KERNEL.match(body) if kernel_time_s is not None and "kernel: " in body else None
    )
    # Positional (message, source_format, kernel_time_s, wall_time, kmsg_seq, facility,
    # level, line_no): one record per fed line, and keywords cost a third more.
    if monotonic:
        return LogRecord(
            body[monotonic.end() :],
            "journal",
            kernel_time_s,
            outer_wall,
            None,
            None,
            level,
            line_no,
        )
    return LogRecord(body, "dmesg", kernel_time_s, outer_wall, None, None, level, line_no)
