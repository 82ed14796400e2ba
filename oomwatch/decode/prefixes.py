"""Reduce log lines in any format to `LogRecord`s, detecting the format line by line.

Formats: raw /dev/kmsg records; dmesg (`[ 12.345678]`, caller ids, `<N>` levels);
`dmesg -T` in any locale and `dmesg --time-format=iso` (both `dmesg-T`: wall clock only);
syslog/kern.log (with or without host, BSD or RFC 3339 stamps); journalctl -k (short,
short-iso, short-precise, short-monotonic, and its indented continuation lines); pasted
text (indentation, `> ` quoting, terminal wrapping, tmux scroll markers).  Lines other
programs wrote into a syslog file are dropped: only the kernel's own lines become records.

Syslog or journal: the short formats look alike; a line is `journal` when its stamp has
sub-second digits, a `+hhmm` offset (short-iso), or it is an indented continuation line
(only journalctl writes those); the assembler extends that to the whole report.

Wall-clock rule (`stamps`): a stamp becomes ISO-8601 only when it carries a year (dmesg -T,
RFC 3339, short-iso, short-full, short-unix).  Syslog/journal stamps without a year keep
the stamp as printed in `time_text`; the assembler dates them from evidence (`YearClock`).
Month names may be in any locale and any case (journalctl prints `%b` of its locale).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime

from oomwatch.decode import forwarded
from oomwatch.decode import lines as L
from oomwatch.decode.dmesg import Stamp, dmesg_record, dmesg_stamp, numeric_record
from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.decode.records import MAX_MESSAGE_CHARS, LogRecord, kmsg_record_from_text
from oomwatch.decode.stamps import YearClock, banner_time, iso_offset

_QUOTE = re.compile(r"[ \t]*(?:>[ \t]?)+")
# First characters of a line a paste may have quoted (`> `) or listed (`* `, `- `, `•`).
_MARKED_STARTS = frozenset(" \t>*-\u2022")
_TMUX_MARKER = re.compile(r"  \[\d{1,9}/\d{1,9}\]$")
# rsyslog's imklog puts the kernel's own time after the tag: `kernel: [ 12.3] msg`.
_DMESG = re.compile(r"(?:<(\d)>)?\[\s*(\d{1,12}\.\d{1,9})\](?: ?\[\s*[TC]\d{1,10}\])?[ \t]?")
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
_UNIX_JOURNAL = lazy_compile(r"(\d{9,11}(?:\.\d{1,9})?)[ \t]+" + _TAG)
# A journal or syslog line whose stamp (and host) was cut off: `kernel: <message>`.
_BARE_KERNEL = lazy_compile(r"kernel:[ \t]?")
# An RFC 3339 stamp (rsyslog, journalctl short-iso, a collector's or CRI log's own stamp);
# util-linux's `dmesg --time-format=iso` is told apart by its comma (`dmesg`).
_ISO_STAMP = lazy_compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?[ \t]+"
)
_HOST_TAG = lazy_compile(_TAG)
# A container runtime's log line (CRI: `<stamp> stdout F <line>`) of a pod that prints the
# kernel log.
_CRI_STREAM = lazy_compile(r"(?:stdout|stderr) [FP] ")
_LEVEL = lazy_compile(r"<(\d)>")
_JOURNAL_BANNER = lazy_compile(r"-- (?:Logs begin|Journal begins|Boot |No entries|Reboot)")
_DICT_LINE = lazy_compile(r" [A-Z_]+=")

# Messages that long wrapped onto the next line in a terminal paste.
_WRAP_MIN_CHARS = 80
# Lines that stand alone in a paste and never continue a wrapped line: grep's group
# separator `--` and other rules, code fences, elisions (`...`, `[...]`, `(...snipped...)`,
# `<snip>`) and shell prompts (`[root@host ~]# dmesg`, `/srv $ dmesg`, `$ dmesg`).
_NOISE = lazy_compile(
    r"""
      [-=_~*]{2,}                                   # --, ----, ====, ~~~~
    | `{3}.* | ~{3}.*                               # code fences
    | [.\u2026]{2,} | \u2026                          # ..., ......, an ellipsis
    | [\[(<]\s*[.\u2026]*\s*(?:snip(?:ped)?)?\s*[.\u2026]*\s*[\])>]   # [...] (...snipped...) <snip>
    | -+\s*snip(?:ped)?\s*-+
    | (?:\[[^\]]{1,80}\]\w{0,20} | \S{0,80}[@:~/]\S{0,80})?\s?[#$%]\s.*   # prompts
    """,
    re.I | re.X,
)
# A message that already ends the way a whole kill, select or header line ends is not cut:
# the next line is not its wrap.  Nor is a line that starts with a syslog stamp.
_COMPLETE = lazy_compile(
    r"(?:or sacrifice child|or a child|oom_score_adj[=:]-?\d{1,6}|,uid=\d{1,10}|-rss:\d{1,20}kB)$"
)
_STAMP_START = lazy_compile(r"\S{2,12}[ \t]+\d{1,2}[ \t]+\d{2}:\d{2}:\d{2}\b")
# The serial/netconsole's note glued before the next record when printk dropped some.
_DROPPED = lazy_compile(r"\*\* \d{1,12} printk messages dropped \*\*\s*")


class LineParser:
    """Stateful line-to-record reduction (continuation lines and wraps need the previous line).

    `clock` (optional) receives what the log says about its own year: journalctl's banner
    on the first line.
    """

    def __init__(self, clock: YearClock | None = None) -> None:
        self.warnings: list[str] = []
        self._clock = clock
        self._pending: LogRecord | None = None
        self._pending_raw_chars = 0
        # Column where the held record's message starts: journalctl and dmesg indent a
        # record's continuation lines to about there; a terminal wrap starts at column 0.
        self._message_col = 0
        self._skipped = False  # this line was another program's (dropped)
        # The last stamped line was another program's: its continuation lines are its own.
        self._foreign = False
        self._prev_marked = False  # the last line ended with a `$` end mark

    def banner(self, line: str) -> None:
        """Read the year from journalctl's first line (`-- Logs begin at <date> ...`)."""
        if self._clock is None:
            return
        quote = _QUOTE.match(line)
        when = banner_time(line[quote.end() :] if quote else line)
        if when is not None:
            self._clock.observe(when, "journal banner")

    def feed(self, line: str, line_no: int | None = None) -> list[LogRecord]:
        """Records completed by this line (a record is held back one line to join wraps)."""
        line = self._unwrapped(line, line_no)
        previous = self._pending
        if line[:1].isspace():
            stripped = line.strip()
            indent = len(line) - len(line.lstrip())
            if self._foreign and stripped:
                return []  # a continuation line of another program's entry
        else:
            stripped, indent = line.rstrip(), 0
        if not stripped:
            self._foreign = False
            return self._release()
        record = self._prefixed(stripped, line_no)
        if record is not None:
            self._foreign = False
            released = self._release()
            if record.message or record.source_format == "kmsg":
                self._hold(record, len(line))
                at = stripped.find(record.message) if record.message else -1
                self._message_col = indent + at if at >= 0 else 0
            return released
        if self._skipped or self._foreign:
            self._foreign = True
            return self._release()
        if previous is not None and forwarded.wants_continuation(previous.message):
            joined = forwarded.join_wrapped(previous.message, stripped)
            if joined is not None:  # a wrapped report line, joined on evidence (`forwarded`)
                self._hold(replace(previous, message=joined), len(line))
                return []
        if _NOISE.fullmatch(stripped):
            return self._release()  # a separator, elision or prompt: never part of a record
        if previous is not None and previous.source_format != "plain":
            continued = self._continued(previous, line, stripped, indent, line_no)
            if continued is not None:
                return continued
        released = self._release()
        level_match = _LEVEL.match(stripped)
        level = int(level_match.group(1)) if level_match else None
        message = stripped[level_match.end() :].strip() if level_match else stripped
        self._hold(LogRecord(message, "plain", level=level, line_no=line_no), len(line))
        self._message_col = 0
        return released

    def _unwrapped(self, line: str, line_no: int | None) -> str:
        """The line without what a paste or a terminal wrapped around it: its end of line, a
        quote's `>`, a tmux marker, a `** N printk messages dropped **` prefix; cut to the
        longest kernel record (with a warning)."""
        if len(line) > MAX_MESSAGE_CHARS:
            self.warnings.append(
                f"line {line_no}: {len(line)} characters, longer than any kernel record; "
                "only the start was read"
            )
            line = line[:MAX_MESSAGE_CHARS]
        line = line.rstrip("\r\n")
        if line_no == 1:
            self.banner(line)
        if line[:1] in _MARKED_STARTS:
            if line[:1] in (" ", "\t", ">"):
                quote = _QUOTE.match(line)
                if quote and ">" in quote.group(0):
                    line = line[quote.end() :]
            if line[:1] in ("*", "-", "\u2022"):
                line = forwarded.strip_list_marker(line)
        if line.endswith("]"):
            marker = _TMUX_MARKER.search(line, max(0, len(line) - 24))
            if marker:
                line = line[: marker.start()].rstrip()
        if line[:2] == "**":
            dropped = _DROPPED.match(line)
            if dropped:
                line = line[dropped.end() :]
        if line[-1:] == "$":
            return self._end_marked(line)
        self._prev_marked = False
        return forwarded.strip_glued_prompt(line) if "login: " in line else line

    def _end_marked(self, line: str) -> str:
        """`cat -A` and screen captures mark each line's end with `$`: two marked lines in a
        row prove the marks (one alone may be a pager's cut or a name's), which then go."""
        if not self._prev_marked:
            self._prev_marked = True
            return line
        pending = self._pending
        if pending is not None and pending.message.endswith("$"):
            self._pending = replace(pending, message=pending.message[:-1].rstrip())
        return line[:-1]

    def finish(self) -> list[LogRecord]:
        """The record still held back at end of input."""
        return self._release()

    def _continued(
        self, previous: LogRecord, line: str, stripped: str, indent: int, line_no: int | None
    ) -> list[LogRecord] | None:
        """A continuation line or a terminal wrap of the held record; None if it is neither."""
        if indent and indent >= max(4, self._message_col // 2):
            if previous.source_format == "kmsg" and _DICT_LINE.match(line):
                return []  # a /dev/kmsg dictionary line: metadata, not text
            released = self._release()
            # Only journalctl indents continuation lines under the stamp (rsyslog never).
            source = "journal" if previous.source_format == "syslog" else None
            continued = replace(
                previous,
                message=stripped,
                line_no=line_no,
                source_format=source or previous.source_format,
            )
            self._hold(continued, len(line))
            return released
        if (
            self._pending_raw_chars >= _WRAP_MIN_CHARS
            and not _COMPLETE.search(previous.message)
            and not _STAMP_START.match(stripped)
        ):
            joint = " " if indent else ""
            self._pending = replace(previous, message=previous.message + joint + stripped)
            self._pending_raw_chars = len(line)
            return []
        return None

    def _hold(self, record: LogRecord, raw_chars: int) -> None:
        self._pending = record
        self._pending_raw_chars = raw_chars

    def _release(self) -> list[LogRecord]:
        """The held record, handed on (none held: empty)."""
        record = self._pending
        if record is None:
            return []
        self._pending = None
        return [record]

    def _prefixed(self, s: str, line_no: int | None) -> LogRecord | None:
        """The record for a line with a recognised prefix; None (and `_skipped`) otherwise."""
        self._skipped = False
        first = s[:1]
        if first.isdigit():
            record = self._from_digit(s, line_no)
            if record is not None or self._skipped:
                return record
        elif first == "[" or first == "<":
            dmesg = _DMESG.match(s)  # the common `[ 1234.567890] msg`, without a Stamp
            if dmesg:
                level = int(dmesg.group(1)) if dmesg.group(1) else None
                return numeric_record(s, dmesg.end(), float(dmesg.group(2)), level, line_no)
            stamp = dmesg_stamp(s)
            if stamp is not None:
                return self._from_dmesg(stamp, s, line_no)
        elif first == "-" and _JOURNAL_BANNER.match(s):
            self._skipped = True
            return None
        elif first == "k" and s.startswith("kernel:"):
            bare = _BARE_KERNEL.match(s)
            if bare:
                return self._kernel_body(s[bare.end() :], "plain", None, None, line_no)
        elif "a" <= first <= "u":
            stamp = dmesg_stamp(s)  # dmesg -x: `kern  :warn  : ...`
            if stamp is not None:
                return self._from_dmesg(stamp, s, line_no)
        return self._from_syslog_or_inner(s, line_no)

    def _from_digit(self, s: str, line_no: int | None) -> LogRecord | None:
        """A line that begins with a digit: a /dev/kmsg record, an ISO stamp, a dmesg stamp cut
        at its start, `journalctl -o short-unix`; None (and `_skipped` if it is a program's
        record) otherwise."""
        if "," in s[:8] and ";" in s[:240]:
            record = kmsg_record_from_text(s, line_no)
            if record is not None:
                return record
            if re.match(r"\d{1,3},\d{1,20},\d{1,20},[-c+]", s):
                self._skipped = True  # a userspace record written to /dev/kmsg
                return None
        if s[4:5] == "-":
            record = self._from_iso(s, line_no)
            if record is not None or self._skipped:
                return record
        elif "] " in s[:24]:
            stamp = dmesg_stamp(s)  # a paste that begins inside the first stamp
            if stamp is not None:
                return self._from_dmesg(stamp, s, line_no)
        unix = _UNIX_JOURNAL.match(s)
        return self._from_unix(unix, s, line_no) if unix else None

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
        inner = _DMESG.match(body)
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
        level = _LEVEL.match(body)
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


def parse_lines(lines: Iterable[str], clock: YearClock | None = None) -> Iterator[LogRecord]:
    """Log lines in any supported format -> kernel `LogRecord`s (other programs' lines dropped)."""
    parser = LineParser(clock)
    for line_no, line in enumerate(lines, 1):
        yield from parser.feed(line, line_no)
    yield from parser.finish()
