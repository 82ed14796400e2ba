"""`journalctl -o json` (and json-seq, json-sse, json-pretty) and `-o export` dumps as log
lines the decoder already reads: `<ISO time> <host> kernel: [<seconds>] <message>`.

The journal's own fields carry what a text log loses: `__REALTIME_TIMESTAMP` is the wall
clock with its year (written in UTC), `_SOURCE_MONOTONIC_TIMESTAMP` the kernel's printk
stamp (seconds since boot), `_HOSTNAME` the node.  Entries of other programs become empty
lines (the decoder would drop them anyway), so line N of the output is line N of a json
dump and warnings keep pointing at the right line.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from oomwatch.report.sniff import decode_bytes

MAX_OBJECT_LINES = 4096  # a json-pretty entry longer than this is not a journal entry
MAX_FIELD_BYTES = 1 << 20  # export: longer binary fields (core dumps) are skipped, not kept
_WANTED = (
    "MESSAGE",
    "_TRANSPORT",
    "SYSLOG_IDENTIFIER",
    "__REALTIME_TIMESTAMP",
    "_SOURCE_MONOTONIC_TIMESTAMP",
    "_HOSTNAME",
)


def _value(raw: object) -> str | None:
    """A journal field as text: a string, a byte array (non-UTF-8 or control bytes), or the
    first of several values; None for null (journalctl writes null for fields over 4 KiB)."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)
    if isinstance(raw, list) and raw:
        if all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in raw):
            return decode_bytes(bytes(raw))
        return _value(raw[0])
    return None


def _micros(raw: str | None) -> int | None:
    """Microseconds as journalctl writes them: ASCII digits (`isdigit` admits `³`)."""
    if raw is None or not raw.isascii() or not raw.isdigit():
        return None
    return int(raw)


@functools.lru_cache(maxsize=256)
def _head(seconds: int, host: str | None) -> str | None:
    """`<UTC time to the second>` and ` <host> kernel: ` around the microseconds, cached:
    consecutive entries share both."""
    try:
        stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return None
    host = "".join((host or "").split())[:255]
    return stamp + "\0+0000 " + (f"{host} " if host else "") + "kernel: "


def entry_lines(entry: dict[str, Any]) -> list[str] | None:
    """The log lines of one journal entry; None when it is no kernel message."""
    message = _value(entry.get("MESSAGE"))
    if message is None:
        return None
    transport = _value(entry.get("_TRANSPORT"))
    ident = _value(entry.get("SYSLOG_IDENTIFIER"))
    if (transport or "kernel") != "kernel" or (transport is None and ident not in (None, "kernel")):
        return None
    prefix = ""
    if (wall := _micros(_value(entry.get("__REALTIME_TIMESTAMP")))) is not None:
        seconds, micro = divmod(wall, 1_000_000)
        head = _head(seconds, _value(entry.get("_HOSTNAME")))
        prefix = head.replace("\0", f".{micro:06d}") if head else ""
    if (mono := _micros(_value(entry.get("_SOURCE_MONOTONIC_TIMESTAMP")))) is not None:
        seconds, micro = divmod(mono, 1_000_000)
        prefix += f"[{seconds:5d}.{micro:06d}] "
    if "\n" not in message:
        return [prefix + message] if message.strip() else None
    return [prefix + line for line in message.split("\n") if line.strip()] or None


class JsonLines:
    """Converts a json dump piece by piece; one output line per input line."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.bad = 0  # lines or objects that are not journal JSON
        self.first_bad: int | None = None
        self.null_messages = 0
        self.too_deep = 0  # lines of JSON nested deeper than it can be read
        self._line_no = 0
        self._open: list[str] | None = None  # json-pretty: the lines of the entry being read

    def feed(self, piece: str) -> str:
        lines = piece.split("\n")
        last = lines.pop()  # "" after a piece's final newline; an unfinished last line else
        out = [self._line(line) for line in lines]
        if last:
            out.append(self._line(last))
        return "\n".join(out) + ("\n" if not last else "")

    def warnings(self) -> list[str]:
        out = []
        if self.bad:
            out.append(
                f"{self.name}: {self.bad} lines are not journal JSON (first: line"
                f" {self.first_bad}); they were skipped"
            )
        if self.too_deep:
            out.append(
                f"{self.name}: {self.too_deep} lines nest JSON deeper than can be read (no"
                " journal entry does); they were skipped"
            )
        if self.null_messages:
            out.append(
                f"{self.name}: {self.null_messages} journal entries have a null MESSAGE"
                " (journalctl writes null for fields over 4 KiB unless given --all)"
            )
        return out

    def _line(self, line: str) -> str:
        self._line_no += 1
        text = line.lstrip("\x1e").removeprefix("data: ").strip()
        if self._open is not None:
            self._open.append(text)
            if text != "}" and len(self._open) < MAX_OBJECT_LINES:
                return ""
            joined, self._open = "".join(self._open), None
            return self._object(joined)
        if text == "{":
            self._open = [text]
            return ""
        if not text or text.startswith(("id: ", "event: ")):  # blank, or json-sse framing
            return ""
        if not text.startswith("{"):
            return line  # not JSON: a text log line (pasted next to the dump) stays itself
        if '"kernel"' not in text and ('_TRANSPORT"' in text or 'SYSLOG_IDENTIFIER"' in text):
            return ""  # another program's entry: not worth parsing
        return self._object(text)

    def _object(self, text: str) -> str:
        try:
            entry = json.loads(text)
        except ValueError:
            entry = None
        except RecursionError:  # arrays in arrays past Python's stack: no journal entry
            self.too_deep += 1
            entry = None
        if not isinstance(entry, dict):
            self.bad += 1
            self.first_bad = self.first_bad or self._line_no
            return ""
        if "MESSAGE" in entry and entry["MESSAGE"] is None:
            self.null_messages += 1
        return "\n".join(entry_lines(entry) or [""])


def export_lines(blocks: Iterator[bytes], warnings: list[str], name: str) -> Iterator[bytes]:
    """`journalctl -o export` (`KEY=value` lines, or `KEY\\n<size: 8 bytes LE><data>\\n` for
    binary values; a blank line ends an entry) -> one log line (maybe empty) per entry."""
    buf = bytearray()
    entry: dict[str, Any] = {}
    skip = 0  # bytes of an oversized binary value still to drop
    skipped = 0
    for block in blocks:
        if skip:
            dropped = min(skip, len(block))
            block, skip = block[dropped:], skip - dropped
        buf += block
        out: list[str] = []
        pos = 0
        while (newline := buf.find(b"\n", pos)) >= 0:
            line = bytes(buf[pos:newline])
            if not line:
                out.append("\n".join(entry_lines(entry) or [""]))
                entry, pos = {}, newline + 1
                continue
            key, eq, value = line.partition(b"=")
            if eq:
                if key.decode("ascii", "replace") in _WANTED:
                    entry[key.decode("ascii")] = decode_bytes(value)
                pos = newline + 1
                continue
            if len(buf) < newline + 9:
                break  # the binary value's size is not here yet
            size = int.from_bytes(buf[newline + 1 : newline + 9], "little")
            end = newline + 9 + size + 1  # the value and its closing newline
            if size > MAX_FIELD_BYTES:
                skipped += 1
                skip = max(end - len(buf), 0)
                pos = min(end, len(buf))
                continue
            if len(buf) < end:
                break
            if line.decode("ascii", "replace") in _WANTED:
                entry[line.decode("ascii")] = decode_bytes(bytes(buf[newline + 9 : end - 1]))
            pos = end
        del buf[:pos]
        if len(buf) > MAX_FIELD_BYTES + 64:  # a text field without end: not an export
            warnings.append(f"{name}: a journal export line over 1 MiB; the rest was not read")
            return
        if out:
            yield ("\n".join(out) + "\n").encode()
    if entry:
        yield ("\n".join(entry_lines(entry) or [""]) + "\n").encode()
    if skipped:
        warnings.append(f"{name}: {skipped} binary journal fields over 1 MiB were skipped")
