"""Pure decoder of kernel OOM reports: log text or /dev/kmsg records in, `Incident`s out.

No I/O here: sources read the bytes, this package turns them into incidents.
- `parse_kmsg_record(raw)` / `parse_lines(lines)`: any log format -> `LogRecord`s;
- `ReportAssembler`: records -> incidents, one record at a time (the daemon's live path;
  `feed_kmsg(raw)` skips chatter before parsing it, `skips_kmsg(raw)` says it would);
- `decode_kmsg_records(raws)`: a /dev/kmsg backlog -> `DecodeResult`;
- `decode_text(text)` / `decode_lines(lines)`: a whole log -> `DecodeResult`;
- `TextScanner`: `decode_text` for a log that comes in pieces (a file read in chunks);
- `Reference`: what the caller knows of when a log was written (dates yearless stamps).
"""

from oomwatch.decode.assembler import ReportAssembler
from oomwatch.decode.prefixes import parse_lines
from oomwatch.decode.records import SOURCE_FORMATS, LogRecord, parse_kmsg_record
from oomwatch.decode.scan import (
    DecodeResult,
    TextScanner,
    decode_kmsg_records,
    decode_lines,
    decode_text,
)
from oomwatch.decode.stamps import Reference

__all__ = [
    "SOURCE_FORMATS",
    "DecodeResult",
    "LogRecord",
    "Reference",
    "ReportAssembler",
    "TextScanner",
    "decode_kmsg_records",
    "decode_lines",
    "decode_text",
    "parse_kmsg_record",
    "parse_lines",
]
