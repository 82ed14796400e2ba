"""`oomwatch report [FILE|-] [--store DIR] [--json] [--html FILE] [--since] [--pod] [--last]`.

Without FILE or --store it reads the live kernel ring (/dev/kmsg backlog).  Exit 0 whether
or not kills were found; exit 2 with a message naming the input when it cannot be read.

Memory stays bounded whatever the input (a million `invoked oom-killer` lines took 5 GB:
issue 14): incidents stream from the input through diagnosis (with a bounded crash-loop
history) to `--json`, which writes each as it comes; a text or HTML report, and `--last`,
hold at most MAX_HELD incidents, size-capped, and say what they left out.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import TextIO

from oomwatch.cgroup_identity import annotate
from oomwatch.diagnosis import diagnose
from oomwatch.diagnosis.trends import CRASH_LOOP_WINDOW_S, workload_key
from oomwatch.incident import Incident
from oomwatch.report import filters, jsonout, text
from oomwatch.report.inputs import (
    KMSG_PATH,
    InputError,
    Loaded,
    Stream,
    Warnings,
    load_kmsg,
    open_file,
    open_store,
)
from oomwatch.store_limits import capped

MAX_HELD = 1000  # incidents held for a text or HTML report, or for --last
HISTORY_PER_WORKLOAD = 32  # earlier kills kept per container for crash-loop findings
HISTORY_WORKLOADS = 4096


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="a saved log (dmesg, dmesg -T, kern.log/syslog, journalctl -k, raw /dev/kmsg,"
        " pasted text); '-' reads stdin; default: the live kernel log",
    )
    parser.add_argument("--store", metavar="DIR", help="read the daemon's incident store in DIR")
    parser.add_argument("--json", action="store_true", help="print the JSON contract instead")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    parser.add_argument("--since", metavar="WHEN", help="only kills after WHEN: 2h, 30m, 1d or ISO")
    parser.add_argument("--pod", metavar="POD", help="only this pod: name, namespace/name or UID")
    parser.add_argument("--last", metavar="N", type=int, help="only the newest N kills")
    parser.add_argument("--kmsg", default=KMSG_PATH, help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    try:
        since = filters.parse_since(args.since) if args.since else None
    except ValueError as exc:
        return _fail(str(exc))
    if args.last is not None and args.last < 0:
        return _fail(f"--last {args.last}: expected a number ≥ 0")
    if args.file and args.store:
        return _fail("give either FILE or --store, not both")
    try:
        stream, source = _open(args, since)
        warn = stream.warnings.add
        shown = filters.selected(_diagnosed(stream.incidents), since, args.pod, warn)
        if args.last is not None:  # the newest N: only they are held
            shown = iter(_held(shown, min(args.last, MAX_HELD), stream.warnings, "--last"))
        if args.json and not args.html:
            _write(lambda out: jsonout.write(out, shown, stream.warnings.lines))
            return 0
        incidents = _held(shown, MAX_HELD, stream.warnings, "the report")
    except InputError as exc:
        return _fail(str(exc))
    warnings = stream.warnings.lines()
    if args.html:
        from oomwatch.report import page

        try:
            with open(args.html, "w", encoding="utf-8") as fh:
                fh.write(page.render(incidents, warnings, source))
        except OSError as exc:
            return _fail(f"cannot write {args.html}: {exc.strerror or exc}")
    _write(
        lambda out: out.write(
            jsonout.render(incidents, warnings)
            if args.json
            else text.render(incidents, warnings, source)
        )
    )
    return 0


def _write(emit: Callable[[TextIO], object]) -> None:
    try:
        emit(sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:  # `oomwatch report | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the exit-time flush quiet


def _open(args: argparse.Namespace, since: datetime | None) -> tuple[Stream, str]:
    """The incidents to show (annotated, streamed) and a name for the input.  A store is
    read from a crash-loop window before `since`: those kills are the history diagnosis
    needs, and the filter hides them afterwards."""
    if args.store:
        start = since - timedelta(seconds=CRASH_LOOP_WINDOW_S) if since else None
        return open_store(args.store, start), f"store {args.store}"
    if args.file:
        stream = open_file(args.file)
        source = "stdin" if args.file == "-" else args.file
    else:
        stream = _loaded(load_kmsg(args.kmsg))
        source = f"the kernel log ({args.kmsg})"
    return Stream((annotate(i) for i in stream.incidents), stream.warnings), source


def _loaded(loaded: Loaded) -> Stream:
    warnings = Warnings()
    warnings.add(*loaded.warnings)
    return Stream(iter(loaded.incidents), warnings)


def _diagnosed(incidents: Iterable[Incident]) -> Iterator[Incident]:
    """Each incident diagnosed with the earlier kills of its workload (crash-loop history):
    the last HISTORY_PER_WORKLOAD of each of the last HISTORY_WORKLOADS workloads."""
    history: OrderedDict[tuple[str, ...], deque[Incident]] = OrderedDict()
    for incident in incidents:
        key = workload_key(incident)
        earlier = history.get(key) if key is not None else None
        yield diagnose(incident, tuple(earlier) if earlier else ())
        if key is None:
            continue
        if earlier is None:
            earlier = history[key] = deque(maxlen=HISTORY_PER_WORKLOAD)
        earlier.append(incident)
        history.move_to_end(key)
        if len(history) > HISTORY_WORKLOADS:
            history.popitem(last=False)


def _held(
    incidents: Iterable[Incident], limit: int, warnings: Warnings, what: str
) -> list[Incident]:
    """The newest `limit` incidents, task tables and notes capped as the store caps them
    (oomwatch.store_limits); a warning says how many older ones were left out."""
    held: deque[Incident] = deque(maxlen=limit)
    seen = 0
    for incident in incidents:
        held.append(capped(incident))
        seen += 1
    if seen > limit and limit == MAX_HELD:
        warnings.add(
            f"{what} holds the newest {MAX_HELD} of {seen} incidents; narrow it with --since,"
            " --pod or --last, or use --json, which streams every one"
        )
    return list(held)


def _fail(message: str) -> int:
    sys.stderr.write(f"oomwatch report: {message}\n")
    return 2
