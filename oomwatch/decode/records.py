"""One kernel log message with its log-format prefix removed, and the raw /dev/kmsg parser.

Every input format (a /dev/kmsg read, dmesg, syslog, journalctl, a paste) is reduced to
`LogRecord`s first, so the report assembler only ever sees kernel message text.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.decode.lazy_re import lazy_compile

SOURCE_FORMATS = ("kmsg", "dmesg", "dmesg-T", "syslog", "journal", "plain")

# Longest message the decoder looks at.  Kernel records are at most 8 KiB even before the
# 1 KiB text limit, so anything longer is not a kernel line and is cut to keep regexes cheap.
MAX_MESSAGE_CHARS = 16384

_KMSG_HEADER = lazy_compile(r"(\d{1,3}),(\d{1,20}),(\d{1,20}),([-c+])[^;\n]{0,200};")
_ESCAPE = lazy_compile(r"\\x([0-9a-fA-F]{2})")


@dataclass(slots=True)
class LogRecord:
    """A kernel message and what its log prefix said about it; never changed once made.

    `message` may contain newlines only when the kernel printed several lines in one record
    (a /dev/kmsg record with `\\x0a` escapes); the assembler decides how to split it.
    Not a frozen dataclass: one is made per log line (20,000 for one group kill), and a
    frozen one's `__init__` costs six times as much.
    """

    message: str
    source_format: str
    kernel_time_s: float | None = None
    wall_time: str | None = None
    kmsg_seq: int | None = None
    facility: int | None = None
    level: int | None = None
    line_no: int | None = None
    # The log's own time stamp as printed, kept when it cannot be made ISO-8601 (no year).
    time_text: str | None = None


def unescape_kmsg(text: str) -> str:
    """Undo /dev/kmsg's `\\xNN` escaping (non-printable bytes and the backslash itself).

    Escaped bytes are reassembled as UTF-8 so a multi-byte name survives; bytes that do not
    form valid UTF-8 become U+FFFD.
    """
    if "\\x" not in text:
        return text
    out: list[str] = []
    pending = bytearray()
    pos = 0
    for match in _ESCAPE.finditer(text):
        if match.start() != pos:
            if pending:
                out.append(pending.decode("utf-8", "replace"))
                pending.clear()
            out.append(text[pos : match.start()])
        pending.append(int(match.group(1), 16))
        pos = match.end()
    if pending:
        out.append(pending.decode("utf-8", "replace"))
    out.append(text[pos:])
    return "".join(out)


def kmsg_record_from_text(text: str, line_no: int | None = None) -> LogRecord | None:
    """Parse `prio,seq,usec,flags[,...];message` (plus dictionary lines) already as text.

    Returns None for userspace-written records (facility != 0) and for text that is not a
    kmsg record.  Shared by `parse_kmsg_record` and the line parser for pasted kmsg dumps.
    """
    match = _KMSG_HEADER.match(text)
    if match is None:
        return None
    prio = int(match[1])
    if prio >> 3:  # facility
        return None
    start = match.end()
    stop = text.find("\n", start)  # dictionary lines (" SUBSYSTEM=...") are metadata
    if stop < 0:
        stop = len(text)
    body = text[start : min(stop, start + MAX_MESSAGE_CHARS)].rstrip("\r")
    return LogRecord(
        unescape_kmsg(body) if "\\x" in body else body,
        "kmsg",
        int(match[3]) / 1e6,
        None,
        int(match[2]),
        0,
        prio & 7,
        line_no,
    )


def parse_kmsg_record(raw: bytes) -> LogRecord | None:
    """Parse one read() of /dev/kmsg; None for userspace records (facility != 0) or garbage.

    The record `kmsg_record_from_text` makes of its text, but the kernel's header and the
    message are cut from the bytes by one match and only the message is decoded: the agent
    parses every record of a report inside the kill's path (80 for one kill).  A header the
    bytes pattern does not take (never the kernel's) goes the text parser's way.
    """
    match = _KMSG_RECORD.match(raw)
    if match is None:
        return _parse_kmsg_text(raw)
    prio_b, seq_b, usec_b, body = match.groups()
    prio = int(prio_b)
    if prio >> 3:  # facility
        return None
    text = body.decode("utf-8", "replace").rstrip("\r")
    return LogRecord(
        unescape_kmsg(text) if "\\x" in text else text,
        "kmsg",
        int(usec_b) / 1e6,
        None,
        int(seq_b),
        0,
        prio & 7,
    )


def kernel_written(raw: bytes) -> bool:
    """Whether a /dev/kmsg record's priority is a kernel one (facility 0: `0,` to `7,`
    opens it; one written to /dev/kmsg from userspace has facility 1 or more, as
    `devkmsg_write` in kernel/printk/printk.c gives LOG_USER where the writer gives none),
    looked at before anything of the record may change the assembler."""
    return raw[1:2] == b"," and b"0" <= raw[:1] <= b"7"


def kmsg_stamp_s(raw: bytes) -> float | None:
    """`parse_kmsg_record(raw).kernel_time_s` without the message: for a record the agent
    skips unread (`ReportAssembler.skips_kmsg`), whose stamp still tells the clock."""
    match = _KMSG_RECORD.match(raw)
    if match is None:
        record = _parse_kmsg_text(raw)
        return None if record is None else record.kernel_time_s
    return None if int(match[1]) >> 3 else int(match[3]) / 1e6


# `_KMSG_HEADER` on the bytes, and the message up to its dictionary lines.
_KMSG_RECORD = lazy_compile(
    rb"(\d{1,3}),(\d{1,20}),(\d{1,20}),[-c+][^;\n]{0,200};([^\n]{0,%d})" % MAX_MESSAGE_CHARS
)


def _parse_kmsg_text(raw: bytes) -> LogRecord | None:
    if not raw or not raw[:1].isdigit():
        return None
    semicolon = raw.find(b";", 0, 256)
    if semicolon < 0:
        return None
    text = raw[: MAX_MESSAGE_CHARS + semicolon + 1].decode("utf-8", "replace")
    return kmsg_record_from_text(text)
