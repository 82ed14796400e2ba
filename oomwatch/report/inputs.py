"""Where a report's incidents come from: a log file, stdin, the daemon's store, or the live
kernel ring.  Files are streamed in pieces whatever they came as (gzip, UTF-16, a journal
dump: see `sniff`), and their incidents handed on as each piece is decoded: a multi-gigabyte
kern.log, or one of a million OOM headers, is never held whole.  An input that
cannot be read is an `InputError` naming it, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from oomwatch.decode.stamps import Reference
from oomwatch.incident import Incident
from oomwatch.report import journal, sniff
from oomwatch.report.sniff import InputError, decode_bytes
from oomwatch.report.unread import Signs

MAX_LINE_BYTES = 64 * 1024  # far above any kernel record (8 KiB); longer lines are cut
MAX_WARNINGS = 200  # kept; the rest only counted
READ_BLOCK_BYTES = 1 << 20
# A file is decoded in pieces of about this size (cut at a newline): fast whole-text scanning
# (`TextScanner`) with memory that does not grow with the file.  1 MiB: a piece dense with
# reports holds ~11k incidents at once (4 MiB held 45k, 130 MiB), and scanning is as fast.
CHUNK_BYTES = 1 << 20
KMSG_PATH = "/dev/kmsg"


@dataclass(slots=True)
class Loaded:
    """Incidents in input order (oldest first) and what went wrong on the way."""

    incidents: list[Incident]
    warnings: list[str] = field(default_factory=list)
    # What the input turned out to be, when not plain log text ("gzip", "journal JSON").
    forms: list[str] = field(default_factory=list)
    # Lines that look like an OOM kill that no incident accounts for: (line number, text).
    unread: list[tuple[int, str]] = field(default_factory=list)
    dropped_warnings: int = 0  # past MAX_WARNINGS

    def warn(self, *items: str) -> None:
        for item in items:
            if len(self.warnings) < MAX_WARNINGS:
                self.warnings.append(item)
            else:
                self.dropped_warnings += 1

    def all_warnings(self) -> list[str]:
        more = self.dropped_warnings
        return [*self.warnings, *([f"{more} more warnings not shown"] if more else [])]


@dataclass(slots=True)
class Stream:
    """Incidents in input order as they are read; `loaded` (its `incidents` unused) gets the
    warnings, forms and unread lines as reading goes, complete once `incidents` is spent.
    Reading happens while `incidents` is iterated: an error then is an `InputError` too."""

    incidents: Iterator[Incident]
    loaded: Loaded


@dataclass(slots=True)
class _ReadStats:
    """What reading found on the way, for the warnings at the end."""

    cut: int = 0  # lines cut at MAX_LINE_BYTES
    not_utf8: str | None = None  # the warning for the first byte that is not UTF-8, if any
    clean: bool = False  # remove colour escapes and odd spaces from each piece


def _cut_line(line: bytes) -> bytes:
    """The first MAX_LINE_BYTES of a line, not splitting a UTF-8 character."""
    end = MAX_LINE_BYTES
    while end > MAX_LINE_BYTES - 3 and (line[end] & 0xC0) == 0x80:
        end -= 1
    return line[:end] + b"\n"


def _text(
    blocks: list[bytes | memoryview], offset: int, stats: _ReadStats
) -> tuple[str, bytes | None]:
    """The blocks as one text (emptying the list first, so at most two copies coexist),
    cleaned (`sniff.clean`) when `stats.clean`, and the bytes it was decoded from where they
    are its UTF-8 form (valid UTF-8, nothing cleaned): the scanner searches them in place."""
    data = b"".join(blocks)
    blocks.clear()
    try:
        text = data.decode()
    except UnicodeDecodeError as error:
        stats.not_utf8 = stats.not_utf8 or (
            f"input is not all UTF-8 (first at byte {offset + error.start}): single stray bytes"
            " were read as Windows-1252, cut characters replaced"
        )
        text = decode_bytes(data)
        return (sniff.clean(text) if stats.clean else text), None
    cleaned = sniff.clean(text, data) if stats.clean else text
    return cleaned, data if cleaned is text else None


def _blocks(stream: BinaryIO, name: str) -> Iterator[bytes]:
    try:
        while block := stream.read(READ_BLOCK_BYTES):
            yield block
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from exc


def _pieces(blocks: Iterable[bytes], stats: _ReadStats) -> Iterator[tuple[str, bytes | None]]:
    """The input as text in pieces of about CHUNK_BYTES that end at a newline, each with its
    UTF-8 bytes where `_text` has them.

    A line still unfinished after MAX_LINE_BYTES is cut there (counted) and the rest of it
    skipped, so memory stays bounded whatever the input.  Bytes that are not UTF-8 are read
    as `decode_bytes` says (the first noted with its offset); `\n` never occurs inside a
    UTF-8 sequence, so cutting at newlines cannot split a character.
    """
    pieces: list[bytes | memoryview] = []  # whole lines of the next piece
    size = 0  # bytes in `pieces`
    start = 0  # input offset of the next piece
    read = 0  # input bytes read so far
    pending = b""  # the start of a line not yet finished
    skipping = False  # inside the rest of a line that was already cut
    for block in blocks:
        at, read = read, read + len(block)
        if skipping:
            newline = block.find(b"\n")
            if newline < 0:
                continue
            block, skipping, start = block[newline + 1 :], False, at + newline + 1
        last = block.rfind(b"\n") + 1
        if last:  # views, not copies: the piece's one copy is `_text`'s join
            view = memoryview(block)
            pieces += (pending, view[:last])
            size += len(pending) + last
            pending = bytes(view[last:])
        else:
            pending += block
        if len(pending) > MAX_LINE_BYTES:  # the piece ends with the cut line
            stats.cut += 1
            pieces.append(_cut_line(pending))
            yield _text(pieces, start, stats)
            size, pending, skipping = 0, b"", True
        elif size >= CHUNK_BYTES:
            yield _text(pieces, start, stats)
            size, start = 0, start + size
    pieces.append(pending)
    yield _text(pieces, start, stats)


def _unwrap(blocks: Iterator[bytes], name: str, loaded: Loaded) -> tuple[Iterator[bytes], str]:
    """The input as UTF-8 log bytes, whatever it came as (see `sniff`), and its journal form."""
    head, blocks = sniff.peek(blocks)
    if head.startswith(sniff.GZIP_MAGIC):
        loaded.forms.append("gzip")
        head, blocks = sniff.peek(sniff.gunzip(blocks, name, loaded.warnings))
    if (error := sniff.foreign(head, name)) is not None:
        raise error
    if (encoding := sniff.utf16_encoding(head)) is not None:
        loaded.forms.append("UTF-16")
        head, blocks = sniff.peek(sniff.to_utf8(blocks, encoding))
    blocks = sniff.drop_bom(blocks)
    form = sniff.journal_form(head)
    if form == "export":
        loaded.forms.append("journal export")
        blocks = journal.export_lines(blocks, loaded.warnings, name)
    elif form == "json":
        loaded.forms.append("journal JSON")
    return blocks, form or "text"


def _decode_stream(
    stream: BinaryIO, name: str, reference: Reference | None, loaded: Loaded
) -> Iterator[Incident]:
    """Incidents as each piece is decoded: only one piece's worth is held at a time."""
    from oomwatch.decode import TextScanner

    blocks, form = _unwrap(_blocks(stream, name), name, loaded)
    json_lines = journal.JsonLines(name) if form == "json" else None
    stats = _ReadStats(clean=json_lines is None)  # a journal's text is cleaned once decoded
    signs = Signs()
    scanner = TextScanner(reference, line_observer=signs.see)
    witness: list[Incident] = []  # what `Signs.unread` asks: any incident, any with a victim
    decoded: list[str] = []  # the decoder's warnings, bounded like `loaded`'s
    for piece, utf8 in _pieces(blocks, stats):
        if json_lines is not None:
            scanner.feed(sniff.clean(json_lines.feed(piece)))
        else:
            scanner.feed(piece, utf8)
        taken = scanner.take()
        decoded += taken.warnings[: max(0, MAX_WARNINGS - len(decoded))]
        yield from _witnessed(taken.incidents, witness)
    result = scanner.close()
    decoded += result.warnings[: max(0, MAX_WARNINGS - len(decoded))]
    yield from _witnessed(result.incidents, witness)
    sniffed = list(loaded.warnings)  # gzip and journal export: added as they were read
    loaded.warnings.clear()
    loaded.warn(*([stats.not_utf8] if stats.not_utf8 else []), *sniffed)
    if json_lines is not None:
        loaded.warn(*json_lines.warnings())
    loaded.warn(*decoded)
    if stats.cut:
        loaded.warn(f"{name}: {stats.cut} lines longer than {MAX_LINE_BYTES} bytes were cut")
    loaded.unread = signs.unread(witness)


def _witnessed(incidents: list[Incident], witness: list[Incident]) -> Iterator[Incident]:
    """Pass incidents on, keeping the first and the first with a victim for `Signs.unread`."""
    for incident in incidents:
        if not witness or (
            (incident.victims or incident.selected_pid is not None)
            and not any(w.victims or w.selected_pid is not None for w in witness)
        ):
            witness.append(incident)
        yield incident


def open_file(path: str) -> Stream:
    """A saved log (any supported format, any of the forms `sniff` knows); `-` is stdin; a
    kmsg device reads its ring.  Opened now (an `InputError` names it), decoded as iterated."""
    loaded = Loaded([])
    if path == "-":
        import sys

        # A log piped in now was written before now: dates stamps that print no year.
        now = Reference(time.time(), "the time of reading")
        return Stream(_decode_stream(sys.stdin.buffer, "stdin", now, loaded), loaded)
    if os.path.isdir(path):
        raise InputError(f"cannot read {path}: is a directory (give a log file)")
    with contextlib.suppress(OSError):
        if stat.S_ISCHR(os.stat(path).st_mode):  # /dev/kmsg itself: read the ring, don't block
            ring = load_kmsg(path)
            return Stream(iter(ring.incidents), replace(ring, incidents=[]))
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed by the generator, after streaming
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    reference = Reference(os.fstat(stream.fileno()).st_mtime, "the file's modification time")

    def decoded() -> Iterator[Incident]:
        with stream:
            yield from _decode_stream(stream, path, reference, loaded)

    return Stream(decoded(), loaded)


def load_file(path: str) -> Loaded:
    """`open_file`, read whole (for callers that want a list)."""
    opened = open_file(path)
    incidents = list(opened.incidents)
    loaded = opened.loaded
    loaded.incidents, loaded.warnings = incidents, loaded.all_warnings()
    return loaded


def open_store(state_dir: str, since: datetime | None) -> Stream:
    """Incidents the daemon stored (it already annotated and enriched them), oldest first,
    from `since` on, streamed from SQLite (the store is opened now)."""
    from oomwatch.store import IncidentStore, StoreError

    if not os.path.isdir(state_dir):
        raise InputError(f"cannot read store {state_dir}: not a directory")
    try:
        store = IncidentStore.open_readonly(Path(state_dir))
    except StoreError as exc:
        raise InputError(f"cannot read store {state_dir}: {exc}") from exc
    except OSError as exc:
        raise InputError(f"cannot read store {state_dir}: {exc.strerror or exc}") from exc

    def rows() -> Iterator[Incident]:
        try:
            yield from store.iter_query(since=since)
        except Exception as exc:  # sqlite3.DatabaseError: not a database, corrupt, locked
            raise InputError(f"cannot read store {state_dir}: {exc}") from exc
        finally:
            store.close()

    return Stream(rows(), Loaded([]))


def load_kmsg(path: str = KMSG_PATH) -> Loaded:
    """Every OOM report still in the kernel ring; adds the facts only a live node knows."""
    from oomwatch.decode import decode_kmsg_records
    from oomwatch.sources.kmsg import KmsgStats, read_backlog, read_boot_id

    stats = KmsgStats()
    try:
        result = decode_kmsg_records(read_backlog(path, stats))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc} (run as root?)") from exc
    warnings = list(result.warnings)
    if stats.records_lost:
        warnings.append(f"{path}: {stats.records_lost} records were overwritten while reading")
    boot_epoch_s = time.time() - time.monotonic()  # printk's clock is CLOCK_MONOTONIC-like
    try:
        boot_id: str | None = read_boot_id()
    except OSError:
        boot_id = None
    return Loaded([_live(i, boot_epoch_s, boot_id) for i in result.incidents], warnings)


def _live(incident: Incident, boot_epoch_s: float, boot_id: str | None) -> Incident:
    wall = incident.wall_time
    if wall is None and incident.kernel_time_s is not None:
        wall = datetime.fromtimestamp(boot_epoch_s + incident.kernel_time_s, UTC).isoformat()
    survived = incident.container_survived
    if survived is None and incident.kind == "memcg" and not incident.group_kill:
        survived = _still_populated(incident.task_memcg)
    return replace(
        incident, wall_time=wall, boot_id=incident.boot_id or boot_id, container_survived=survived
    )


def _still_populated(relpath: str | None) -> bool | None:
    """Whether the victim's cgroup still has processes now (None: gone, or not found here).

    A restarted container gets a new cgroup, so a populated old one means it lived on.
    """
    if not relpath or relpath == "/" or ".." in relpath.split("/"):
        return None
    for mount in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        procs = Path(mount + relpath) / "cgroup.procs"
        try:
            return bool(procs.read_text().split())
        except OSError:
            continue
    return None
