"""Reduce log lines in any format to `LogRecord`s, detecting the format line by line.

Formats: raw /dev/kmsg records; dmesg (`[ 12.345678]`, caller ids, `<N>` levels);
`dmesg -T` in any locale and `dmesg --time-format=iso` (both `dmesg-T`: wall clock only);
syslog/kern.log (with or without host, BSD or RFC 3339 stamps); journalctl -k (short,
short-iso, short-precise, short-monotonic, and its indented continuation lines); pasted
text (indentation, `> ` quoting, terminal wrapping, tmux scroll markers).  Lines other
programs wrote into a syslog file are dropped: only the kernel's own lines become records.

Lines under another log's stamp (syslog, journal, RFC 3339, CRI, Talos) are read by
`stamped`; this module dispatches by a line's first character and undoes what a paste did.

Wall-clock rule (`stamps`): a stamp becomes ISO-8601 only when it carries a year (dmesg -T,
RFC 3339, short-iso, short-full, short-unix).  Syslog/journal stamps without a year keep
the stamp as printed in `time_text`; the assembler dates them from evidence (`YearClock`).
Month names may be in any locale and any case (journalctl prints `%b` of its locale).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import replace

from oomwatch.decode import forwarded
from oomwatch.decode.dmesg import dmesg_stamp, numeric_record
from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.decode.records import MAX_MESSAGE_CHARS, LogRecord, kmsg_record_from_text
from oomwatch.decode.stamped import (
    BARE_KERNEL,
    DMESG_STAMP,
    PRINTK_LEVEL,
    UNIX_JOURNAL,
    StampedLines,
)
from oomwatch.decode.stamps import YearClock, banner_time

_QUOTE = re.compile(r"[ \t]*(?:>[ \t]?)+")
# First characters of a line a paste may have quoted (`> `) or listed (`* `, `- `, `•`).
_MARKED_STARTS = frozenset(" \t>*-\u2022")
_TMUX_MARKER = re.compile(r"  \[\d{1,9}/\d{1,9}\]$")
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


class LineParser(StampedLines):
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
        if line[:1] == "[":  # the common `[ 1234.567890] msg`: `_prefixed`'s first case, inline
            stripped = line.rstrip()
            dmesg = DMESG_STAMP.match(stripped)
            if dmesg:
                self._skipped = False
                plain = numeric_record(stripped, dmesg.end(), float(dmesg.group(2)), None, line_no)
                return self._took(plain, len(line), stripped, 0)
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
            return self._took(record, len(line), stripped, indent)
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
        level_match = PRINTK_LEVEL.match(stripped)
        level = int(level_match.group(1)) if level_match else None
        message = stripped[level_match.end() :].strip() if level_match else stripped
        self._hold(LogRecord(message, "plain", level=level, line_no=line_no), len(line))
        self._message_col = 0
        return released

    @property
    def held(self) -> LogRecord | None:
        """The record held back for a wrap or continuation, if any."""
        return self._pending

    def feed_chatter(
        self, line: str, line_no: int, message_at: int, kernel_time_s: float
    ) -> list[LogRecord]:
        """`feed(line, line_no)` for a line the caller proved plain dmesg (the text scanner's
        `_CHATTER_SHAPE`: `[ seconds] message`, the message not starting with a blank or `[`,
        not ending in a blank, `]` or `$`, far shorter than `MAX_MESSAGE_CHARS`; without
        `login: ` or `kernel: `; not the first line): nothing of `_unwrapped` applies to it
        and its record is the stamp's, so it is built here without the parsers' tests.
        `message_at`: where the message starts; `kernel_time_s`: the stamp's seconds."""
        self._prev_marked = False
        self._skipped = False
        self._foreign = False
        released = self._release()
        message = line[message_at:]
        # Positional, as in `numeric_record` (one record per fed line).
        self._pending = LogRecord(message, "dmesg", kernel_time_s, None, None, None, None, line_no)
        self._pending_raw_chars = len(line)
        self._message_col = line.find(message)
        return released

    def _took(self, record: LogRecord, chars: int, stripped: str, indent: int) -> list[LogRecord]:
        """A line that starts a record: the record held so far is released and this one held
        (one without a message only if it is a kmsg record)."""
        self._foreign = False
        released = self._release()
        if record.message or record.source_format == "kmsg":
            self._hold(record, chars)
            at = stripped.find(record.message) if record.message else -1
            self._message_col = indent + at if at >= 0 else 0
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
            dmesg = DMESG_STAMP.match(s)  # the common `[ 1234.567890] msg`, without a Stamp
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
            bare = BARE_KERNEL.match(s)
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
        unix = UNIX_JOURNAL.match(s)
        return self._from_unix(unix, s, line_no) if unix else None


def parse_lines(lines: Iterable[str], clock: YearClock | None = None) -> Iterator[LogRecord]:
    """Log lines in any supported format -> kernel `LogRecord`s (other programs' lines dropped)."""
    parser = LineParser(clock)
    for line_no, line in enumerate(lines, 1):
        yield from parser.feed(line, line_no)
    yield from parser.finish()
