"""Where a report's incidents come from: a log file, stdin, the daemon's store, or the live
kernel ring.  Files are streamed line by line (a multi-gigabyte kern.log is never read whole)
and an input that cannot be read is an `InputError` naming it, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from oomwatch.incident import Incident

MAX_LINE_BYTES = 64 * 1024  # far above any kernel record (8 KiB); longer lines are cut
READ_BLOCK_BYTES = 1 << 20
KMSG_PATH = "/dev/kmsg"


class InputError(Exception):
    """The input cannot be read; the message names it and says why."""


@dataclass(slots=True)
class Loaded:
    """Incidents in input order (oldest first) and what went wrong on the way."""

    incidents: list[Incident]
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _LineStats:
    cut: int = 0


def _lines(stream: BinaryIO, name: str, stats: _LineStats) -> Iterator[str]:
    """Text lines of a bounded size, read in 1 MiB blocks; invalid UTF-8 becomes U+FFFD.

    A line longer than MAX_LINE_BYTES is cut there (counted) and the rest of it skipped, so
    memory stays bounded whatever the input.  `\n` never occurs inside a UTF-8 sequence, so
    splitting bytes at newlines before decoding cannot break a character.
    """
    pending = b""
    skipping = False  # inside the rest of a line that was already cut
    try:
        while block := stream.read(READ_BLOCK_BYTES):
            if skipping:
                newline = block.find(b"\n")
                if newline < 0:
                    continue
                block, skipping = block[newline + 1 :], False
            data = pending + block
            last = data.rfind(b"\n")
            if last >= 0:
                yield from data[:last].decode("utf-8", "replace").split("\n")
                pending = data[last + 1 :]
            else:
                pending = data
            if len(pending) > MAX_LINE_BYTES:
                stats.cut += 1
                yield pending[:MAX_LINE_BYTES].decode("utf-8", "replace")
                pending, skipping = b"", True
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from exc
    if pending:
        yield pending.decode("utf-8", "replace")


def _decode_stream(stream: BinaryIO, name: str) -> Loaded:
    from oomwatch.decode import decode_lines

    stats = _LineStats()
    result = decode_lines(_lines(stream, name, stats))
    warnings = list(result.warnings)
    if stats.cut:
        warnings.append(f"{name}: {stats.cut} lines longer than {MAX_LINE_BYTES} bytes were cut")
    return Loaded(list(result.incidents), warnings)


def load_file(path: str) -> Loaded:
    """Decode a saved log (any supported format); `-` is stdin; a kmsg device reads its ring."""
    if path == "-":
        import sys

        return _decode_stream(sys.stdin.buffer, "stdin")
    if os.path.isdir(path):
        raise InputError(f"cannot read {path}: is a directory (give a log file)")
    with contextlib.suppress(OSError):
        if stat.S_ISCHR(os.stat(path).st_mode):  # /dev/kmsg itself: read the ring, don't block
            return load_kmsg(path)
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed below, after streaming
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with stream:
        return _decode_stream(stream, path)


def load_store(state_dir: str, since: datetime | None, pod: str | None, last: int | None) -> Loaded:
    """Incidents the daemon stored (it already annotated and enriched them)."""
    from oomwatch.store import IncidentStore, StoreError

    if not os.path.isdir(state_dir):
        raise InputError(f"cannot read store {state_dir}: not a directory")
    try:
        store = IncidentStore.open_readonly(Path(state_dir))
    except StoreError as exc:
        raise InputError(f"cannot read store {state_dir}: {exc}") from exc
    except OSError as exc:
        raise InputError(f"cannot read store {state_dir}: {exc.strerror or exc}") from exc
    try:
        return Loaded(store.query(since=since, pod=pod, last=last))
    except Exception as exc:  # sqlite3.DatabaseError: not a database, corrupt, locked
        raise InputError(f"cannot read store {state_dir}: {exc}") from exc
    finally:
        store.close()


def load_kmsg(path: str = KMSG_PATH) -> Loaded:
    """Every OOM report still in the kernel ring; adds the facts only a live node knows."""
    from oomwatch.decode import ReportAssembler, parse_kmsg_record
    from oomwatch.sources.kmsg import KmsgStats, read_backlog, read_boot_id

    stats = KmsgStats()
    assembler = ReportAssembler()
    incidents: list[Incident] = []
    try:
        for raw in read_backlog(path, stats):
            record = parse_kmsg_record(raw)
            if record is not None:
                incidents.extend(assembler.feed(record))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc} (run as root?)") from exc
    incidents.extend(assembler.flush())
    warnings = list(assembler.warnings)
    if stats.records_lost:
        warnings.append(f"{path}: {stats.records_lost} records were overwritten while reading")
    boot_epoch_s = time.time() - time.monotonic()  # printk's clock is CLOCK_MONOTONIC-like
    try:
        boot_id: str | None = read_boot_id()
    except OSError:
        boot_id = None
    return Loaded([_live(i, boot_epoch_s, boot_id) for i in incidents], warnings)


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
