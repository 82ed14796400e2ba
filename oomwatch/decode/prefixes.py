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

Wall-clock rule: a stamp becomes ISO-8601 only when it carries a year (dmesg -T, RFC 3339,
short-iso).  Syslog/journal stamps without a year leave `wall_time` null and keep the
stamp as printed in `time_text`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import replace

from oomwatch.decode.records import MAX_MESSAGE_CHARS, LogRecord, kmsg_record_from_text

_QUOTE = re.compile(r"[ \t]*(?:>[ \t]?)+")
_TMUX_MARKER = re.compile(r"  \[\d{1,9}/\d{1,9}\]$")
_DMESG = re.compile(r"(?:<(\d)>)?\[\s*(\d{1,12}\.\d{1,9})\](?:\[\s*[TC]\d{1,10}\])?[ \t]?")
# A kernel line inside another log's line (a VM's serial log: `... Guest: <6>[ 12.3] msg`):
# only with its printk level, so an application's text that quotes a dmesg line is not one.
_DMESG_ANYWHERE = re.compile(
    r"<(\d)>\[\s*(\d{1,12}\.\d{3,9})\](?:\[\s*[TC]\d{1,10}\])?[ \t]?"
)
_DMESG_T = re.compile(
    r"(?:<(\d)>)?\[(\S{1,12})[ \t]+(\S{1,12})[ \t]+(\d{1,2})[ \t]+(\d{1,2}:\d{2}:\d{2})[ \t]+"
    r"(\d{4})\](?:\[\s*[TC]\d{1,10}\])?[ \t]?"
)
_BSD_SYSLOG = re.compile(
    r"([A-Z][a-z]{2})[ \t]+(\d{1,2})[ \t]+(\d{2}:\d{2}:\d{2})(\.\d{1,9})?[ \t]+"
    r"(?:(\S{1,255})[ \t]+)?([^\s:\[]{1,128})(?:\[\d{1,10}\])?:[ \t]?"
)
_ISO_SYSLOG = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?)(Z|[+-]\d{2}:?\d{2})?[ \t]+"
    r"(?:(\S{1,255})[ \t]+)?([^\s:\[]{1,128})(?:\[\d{1,10}\])?:[ \t]?"
)
# `dmesg --time-format=iso`: 2024-05-01T10:00:01,123456+02:00 <message>
_DMESG_ISO = re.compile(
    r"(?:<(\d)>)?(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})[,.](\d{1,9})([+-]\d{2}:?\d{2}|Z)[ \t]"
)
# `journalctl -o short-monotonic`: [ 1234.567890] host kernel: <message>
_MONOTONIC_KERNEL = re.compile(r"\S{1,255} kernel: ")
_LEVEL = re.compile(r"<(\d)>")
_JOURNAL_BANNER = re.compile(r"-- (?:Logs begin|Journal begins|Boot |No entries|Reboot)")
_DICT_LINE = re.compile(r" [A-Z_]+=")

# Month names as `dmesg -T` prints them in common locales (strftime %b).
_MONTHS: dict[str, int] = {}
for _names in (
    "jan feb mar apr may jun jul aug sep oct nov dec",
    "jan feb mär apr mai jun jul aug sep okt nov dez",
    "janv. févr. mars avr. mai juin juil. août sept. oct. nov. déc.",
    "ene feb mar abr may jun jul ago sep oct nov dic",
    "янв фев мар апр мая июн июл авг сен окт ноя дек",
):
    for _i, _name in enumerate(_names.split(), 1):
        _MONTHS.setdefault(_name, _i)
_CJK_MONTH = re.compile(r"(\d{1,2})[月월]")
# Messages that long wrapped onto the next line in a terminal paste.
_WRAP_MIN_CHARS = 80


def month_number(text: str) -> int | None:
    """Month of a `dmesg -T` stamp in any locale we know, else None."""
    key = text.lower()
    if key in _MONTHS:
        return _MONTHS[key]
    key = key.rstrip(".")
    if key in _MONTHS:
        return _MONTHS[key]
    cjk = _CJK_MONTH.fullmatch(text)
    if cjk:
        number = int(cjk.group(1))
        return number if 1 <= number <= 12 else None
    if text.isdigit() and 1 <= int(text) <= 12:
        return int(text)
    return None


def _iso_offset(offset: str | None) -> str:
    if not offset:
        return ""
    if offset == "Z" or ":" in offset:
        return offset
    return f"{offset[:3]}:{offset[3:]}"


class LineParser:
    """Stateful line-to-record reduction (continuation lines and wraps need the previous line)."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self._pending: LogRecord | None = None
        self._pending_raw_chars = 0
        self._skipped = False  # this line was another program's (dropped)
        # The last stamped line was another program's: its continuation lines are its own.
        self._foreign = False

    def feed(self, line: str, line_no: int | None = None) -> Iterator[LogRecord]:
        """Records completed by this line (a record is held back one line to join wraps)."""
        if len(line) > MAX_MESSAGE_CHARS:
            self.warnings.append(
                f"line {line_no}: {len(line)} characters, longer than any kernel record; "
                "only the start was read"
            )
            line = line[:MAX_MESSAGE_CHARS]
        line = line.rstrip("\r\n")
        if line[:1] in (" ", "\t", ">"):
            quote = _QUOTE.match(line)
            if quote and ">" in quote.group(0):
                line = line[quote.end() :]
        if line.endswith("]"):
            marker = _TMUX_MARKER.search(line, max(0, len(line) - 24))
            if marker:
                line = line[: marker.start()].rstrip()
        stripped = line.strip()
        previous = self._pending
        if self._foreign and line[:1] in (" ", "\t") and stripped:
            return  # a continuation line of another program's entry
        if not stripped:
            self._foreign = False
            yield from self._release()
            return
        record = self._prefixed(stripped, line_no)
        if record is not None:
            self._foreign = False
            yield from self._release()
            if record.message or record.source_format == "kmsg":
                self._hold(record, len(line))
            return
        if self._skipped or self._foreign:
            self._foreign = True
            yield from self._release()
            return
        if previous is not None and previous.source_format != "plain":
            if line[:1] in (" ", "\t"):
                if previous.source_format == "kmsg" and _DICT_LINE.match(line):
                    return  # a /dev/kmsg dictionary line: metadata, not text
                yield from self._release()
                # Only journalctl indents continuation lines under the stamp (rsyslog never).
                source = "journal" if previous.source_format == "syslog" else None
                continued = replace(
                    previous,
                    message=stripped,
                    line_no=line_no,
                    source_format=source or previous.source_format,
                )
                self._hold(continued, len(line))
                return
            if self._pending_raw_chars >= _WRAP_MIN_CHARS:
                self._pending = replace(previous, message=previous.message + stripped)
                self._pending_raw_chars = len(line)
                return
        yield from self._release()
        level_match = _LEVEL.match(stripped)
        level = int(level_match.group(1)) if level_match else None
        message = stripped[level_match.end() :].strip() if level_match else stripped
        self._hold(LogRecord(message, "plain", level=level, line_no=line_no), len(line))

    def finish(self) -> Iterator[LogRecord]:
        """The record still held back at end of input."""
        yield from self._release()

    def _hold(self, record: LogRecord, raw_chars: int) -> None:
        self._pending = record
        self._pending_raw_chars = raw_chars

    def _release(self) -> Iterator[LogRecord]:
        if self._pending is not None:
            record, self._pending = self._pending, None
            yield record

    def _prefixed(self, s: str, line_no: int | None) -> LogRecord | None:
        """The record for a line with a recognised prefix; None (and `_skipped`) otherwise."""
        self._skipped = False
        first = s[:1]
        if first.isdigit():
            if "," in s[:8] and ";" in s[:240]:
                record = kmsg_record_from_text(s, line_no)
                if record is not None:
                    return record
                if re.match(r"\d{1,3},\d{1,20},\d{1,20},[-c+]", s):
                    self._skipped = True  # a userspace record written to /dev/kmsg
                    return None
            iso = _ISO_SYSLOG.match(s)
            if iso:
                return self._from_iso(iso, s, line_no)
            dmesg_iso = _DMESG_ISO.match(s)
            if dmesg_iso and not _DMESG_ANYWHERE.search(s, 0, 200):
                return self._from_dmesg_iso(dmesg_iso, s, line_no)
        elif first == "[" or first == "<":
            dmesg = _DMESG.match(s)
            if dmesg:
                body = s[dmesg.end() :]
                monotonic = _MONOTONIC_KERNEL.match(body)
                return LogRecord(
                    body[monotonic.end() :].strip() if monotonic else body.strip(),
                    "journal" if monotonic else "dmesg",
                    kernel_time_s=float(dmesg.group(2)),
                    level=int(dmesg.group(1)) if dmesg.group(1) else None,
                    line_no=line_no,
                )
            dmesg_t = _DMESG_T.match(s)
            if dmesg_t:
                return self._from_dmesg_t(dmesg_t, s, line_no)
        elif first == "-" and _JOURNAL_BANNER.match(s):
            self._skipped = True
            return None
        bsd = _BSD_SYSLOG.match(s)
        if bsd:
            return self._from_bsd(bsd, s, line_no)
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
        self, body: str, source_format: str, wall_time: str | None, time_text: str | None,
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

    def _from_bsd(self, m: re.Match[str], s: str, line_no: int | None) -> LogRecord | None:
        if m.group(6) != "kernel":
            self._skipped = True
            return None
        stamp = f"{m.group(1)} {int(m.group(2)):2d} {m.group(3)}{m.group(4) or ''}"
        source_format = "journal" if m.group(4) else "syslog"
        return self._kernel_body(s[m.end() :], source_format, None, stamp, line_no)

    def _from_iso(self, m: re.Match[str], s: str, line_no: int | None) -> LogRecord | None:
        if m.group(5) != "kernel":
            self._skipped = True
            return None
        offset = m.group(3)
        wall = f"{m.group(1)}T{m.group(2).replace(',', '.')}{_iso_offset(offset)}"
        journal = offset is not None and offset != "Z" and ":" not in offset
        return self._kernel_body(
            s[m.end() :], "journal" if journal else "syslog", wall, None, line_no
        )

    def _from_dmesg_iso(self, m: re.Match[str], s: str, line_no: int | None) -> LogRecord:
        wall = f"{m.group(2)}T{m.group(3)}.{m.group(4)}{_iso_offset(m.group(5))}"
        return LogRecord(
            s[m.end() :].strip(),
            "dmesg-T",
            wall_time=wall,
            level=int(m.group(1)) if m.group(1) else None,
            line_no=line_no,
        )

    def _from_dmesg_t(self, m: re.Match[str], s: str, line_no: int | None) -> LogRecord:
        month = month_number(m.group(3))
        day = int(m.group(4))
        hms = m.group(5)
        if len(hms) == 7:
            hms = "0" + hms
        wall = f"{m.group(6)}-{month:02d}-{day:02d}T{hms}" if month and 1 <= day <= 31 else None
        return LogRecord(
            s[m.end() :].strip(),
            "dmesg-T",
            wall_time=wall,
            level=int(m.group(1)) if m.group(1) else None,
            line_no=line_no,
            time_text=None if wall else s[1 : m.end()].split("]")[0],
        )


def parse_lines(lines: Iterable[str]) -> Iterator[LogRecord]:
    """Log lines in any supported format -> kernel `LogRecord`s (other programs' lines dropped)."""
    parser = LineParser()
    for line_no, line in enumerate(lines, 1):
        yield from parser.feed(line, line_no)
    yield from parser.finish()
