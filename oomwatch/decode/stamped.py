"""Lines under another log's stamp: BSD syslog and kern.log (with or without host),
journalctl's short formats (short, short-precise, short-iso, short-full, short-unix),
RFC 3339 stamps of rsyslog, a collector or a CRI log, `talosctl dmesg`, and a dmesg line
inside any of them; `LineParser` (`prefixes`) dispatches here by a line's first character.

Syslog or journal: the short formats look alike; a line is `journal` when its stamp has
sub-second digits, a `+hhmm` offset (short-iso), or it is an indented continuation line
(only journalctl writes those); the assembler extends that to the whole report.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from oomwatch.decode import lines as L
from oomwatch.decode.dmesg import Stamp, dmesg_record, dmesg_stamp
from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.decode.records import LogRecord
from oomwatch.decode.stamps import iso_offset

# rsyslog's imklog puts the kernel's own time after the tag: `kernel: [ 12.3] msg`.
DMESG_STAMP = re.compile(r"(?:<(\d)>)?\[\s*(\d{1,12}\.\d{1,9})\](?: ?\[\s*[TC]\d{1,10}\])?[ \t]?")
# A kernel line inside another log's line (a VM's serial log: `... Guest: <6>[ 12.3] msg`):
# only with its printk level, so an application's text that quotes a dmesg line is not one.
_DMESG_ANYWHERE = lazy_compile(r"<(\d)>\[\s*(\d{1,12}\.\d{3,9})\](?:\[\s*[TC]\d{1,10}\])?[ \t]?")
# BSD syslog and journalctl short/short-precise: the month as the locale spells it (`Jun`,
# `juil.`, `мар`, `3月`), then day, time, optional host and the tag.
# A host never ends with `:`, so `kernel: memory: usage ...` (journalctl --no-hostname, a
# host-less syslog) is the kernel's `memory:` line, not program `memory` on host `kernel:`.
_TAG = r"(?:(\S{0,254}[^\s:])[ \t]+)?([^\s:\[]{1,128})(?:\[\d{1,10}\])?:[ \t]?"
_BSD_SYSLOG = lazy_compile(
    r"([^\s\d\[\]<>(){}:;,=\"'*#|/\\]{2,12}|\d{1,2}[\u6708\uc6d4])[ \t]+(\d{1,2})[ \t]+"
    r"(\d{2}:\d{2}:\d{2})(\.\d{1,9})?[ \t]+" + _TAG
)
# journalctl -o short-full (`Sun 2021-05-30 12:29:02 CST host kernel:`) and short-unix.
_FULL_JOURNAL = lazy_compile(
    r"\S{2,12}[ \t]+(\d{4}-\d{2}-\d{2})[ \t]+(\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?)[ \t]+"
    r"([A-Za-z][\w+-]{0,9})[ \t]+" + _TAG
)
UNIX_JOURNAL = lazy_compile(r"(\d{9,11}(?:\.\d{1,9})?)[ \t]+" + _TAG)
# A journal or syslog line whose stamp (and host) was cut off: `kernel: <message>`.
BARE_KERNEL = lazy_compile(r"kernel:[ \t]?")
# An RFC 3339 stamp (rsyslog, journalctl short-iso, a collector's or CRI log's own stamp);
# util-linux's `dmesg --time-format=iso` is told apart by its comma (`dmesg`).
_ISO_STAMP = lazy_compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?[ \t]+"
)
_HOST_TAG = lazy_compile(_TAG)
# A container runtime's log line (CRI: `<stamp> stdout F <line>`) of a pod that prints the
# kernel log.
_CRI_STREAM = lazy_compile(r"(?:stdout|stderr) [FP] ")
PRINTK_LEVEL = lazy_compile(r"<(\d)>")


class StampedLines:
    """The readers of stamped lines, for `LineParser` (a line of another program sets its
    `_skipped`: dropped, and its continuation lines with it)."""

    _skipped: bool

    def _from_syslog_or_inner(self, s: str, line_no: int | None) -> LogRecord | None:
        """BSD syslog, journalctl's full stamps, `talosctl dmesg`, or a dmesg stamp further in
        (under a collector's or CRI prefix); None if none."""
        bsd = _BSD_SYSLOG.match(s)
        if bsd:
            return self._from_bsd(bsd, s, line_no)
        full = _FULL_JOURNAL.match(s)
        if full:
            return self._from_full(full, s, line_no)
        if "]: " in s[:320]:
            stamp = dmesg_stamp(s)  # `talosctl dmesg`
            if stamp is not None:
                return self._from_dmesg(stamp, s, line_no)
        anywhere = _DMESG_ANYWHERE.search(s, 0, 200)
        if anywhere:
            return LogRecord(
                s[anywhere.end() :].strip(),
                "dmesg",
                kernel_time_s=float(anywhere.group(2)),
                level=int(anywhere.group(1)),
                line_no=line_no,
            )
        return None

    def _kernel_body(
        self,
        body: str,
        source_format: str,
        wall_time: str | None,
        time_text: str | None,
        line_no: int | None,
    ) -> LogRecord:
        inner = DMESG_STAMP.match(body)
        if inner:
            return LogRecord(
                body[inner.end() :].strip(),
                source_format,
                kernel_time_s=float(inner.group(2)),
                wall_time=wall_time,
                level=int(inner.group(1)) if inner.group(1) else None,
                line_no=line_no,
                time_text=time_text,
            )
        level = PRINTK_LEVEL.match(body)
        return LogRecord(
            body[level.end() :].strip() if level else body.strip(),
            source_format,
            wall_time=wall_time,
            level=int(level.group(1)) if level else None,
            line_no=line_no,
            time_text=time_text,
        )

    def _tagged(
        self,
        m: re.Match[str],
        tag_group: int,
        s: str,
        source_format: str,
        wall: str | None,
        text: str | None,
        line_no: int | None,
    ) -> LogRecord | None:
        """A kernel line of a syslog/journal, or None (and `_skipped`) for other programs'.

        Without a host, `stamp word: ...` may be a kernel message that starts with `word:`
        under a stamp that prints no tag (a collector's): a line of the report's own shape
        (`memory: usage ...`, `oom-kill:...`) is the kernel's, whatever stamp it has.
        """
        if m.group(tag_group) == "kernel":
            return self._kernel_body(s[m.end() :], source_format, wall, text, line_no)
        if m.group(tag_group - 1) is None:
            whole = s[m.start(tag_group) :]
            if _is_report_line(whole):
                return self._kernel_body(whole, source_format, wall, text, line_no)
        self._skipped = True
        return None

    def _from_bsd(self, m: re.Match[str], s: str, line_no: int | None) -> LogRecord | None:
        stamp = f"{m.group(1)} {int(m.group(2)):2d} {m.group(3)}{m.group(4) or ''}"
        # journalctl prints the day zero-padded (`May 07`, strftime %d); syslog daemons pad
        # it with a blank (RFC 3164).
        journal = m.group(4) or m.group(2)[:1] == "0"
        source_format = "journal" if journal else "syslog"
        return self._tagged(m, 6, s, source_format, None, stamp, line_no)

    def _from_iso(self, s: str, line_no: int | None) -> LogRecord | None:
        """A line that starts with an ISO-8601 date: dmesg's own, syslog's or a collector's."""
        stamp = dmesg_stamp(s)
        if stamp is not None:  # `dmesg --time-format=iso`: what follows is the message
            return self._from_dmesg(stamp, s, line_no)
        m = _ISO_STAMP.match(s)
        if m is None:
            return None
        fraction, offset = m.group(3), m.group(4)
        wall = f"{m.group(1)}T{m.group(2)}{'.' + fraction if fraction else ''}{iso_offset(offset)}"
        at = m.end()
        cri = _CRI_STREAM.match(s, at)
        at = cri.end() if cri else at
        if s[at : at + 1] in ("[", "<"):  # a dmesg line under another program's stamp
            inner = dmesg_stamp(s[at:])
            if inner is not None:
                return self._from_dmesg(inner, s[at:], line_no, wall)
        tagged = None if cri else _HOST_TAG.match(s, at)
        if tagged is not None:
            journal = offset is not None and offset != "Z" and ":" not in offset
            source = "journal" if journal else "syslog"
            return self._tagged(tagged, 2, s, source, wall, None, line_no)
        if ((fraction and offset) or cri) and not _DMESG_ANYWHERE.search(s, 0, 200):
            return LogRecord(s[at:].strip(), "dmesg-T", wall_time=wall, line_no=line_no)
        return None

    def _from_full(self, m: re.Match[str], s: str, line_no: int | None) -> LogRecord | None:
        zone = "+00:00" if m.group(3) in ("UTC", "GMT") else ""
        wall = f"{m.group(1)}T{m.group(2)}{zone}"
        return self._tagged(m, 5, s, "journal", wall, None, line_no)

    def _from_unix(self, m: re.Match[str], s: str, line_no: int | None) -> LogRecord | None:
        wall = datetime.fromtimestamp(float(m.group(1)), UTC).isoformat()
        return self._tagged(m, 3, s, "journal", wall, None, line_no)

    def _from_dmesg(
        self, stamp: Stamp, s: str, line_no: int | None, outer_wall: str | None = None
    ) -> LogRecord | None:
        """A dmesg line (see `dmesg`); `outer_wall`: the stamp of a log that carried it."""
        if stamp.foreign:
            self._skipped = True  # a program's record in the kernel log (dmesg -r/-x)
            return None
        return dmesg_record(stamp, s, line_no, outer_wall)


def _is_report_line(message: str) -> bool:
    """A kernel OOM report line that starts with `word:` (usage, summary, reaper, stack pid)."""
    return (
        L.parse_usage(message) is not None
        or message.startswith("oom-kill:")
        or L.parse_reaped(message) is not None
        or L.parse_cpu_pid(message) is not None
    )
