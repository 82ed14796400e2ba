"""`oomwatch report [FILE|-] [--store DIR] [--json] [--html FILE] [--details] [--since]
[--pod] [--last]`.

Without FILE or --store it reads the live kernel ring (/dev/kmsg backlog).  Exit 0 whether
or not kills were found; exit 1 when the input has lines that plainly belong to an OOM kill
but no kill could be decoded from them (the report lists them); exit 2 with a message naming
the input when it cannot be read.

Memory stays bounded whatever the input (a million `invoked oom-killer` lines took 5 GB
when held whole): incidents stream from the input through diagnosis (with a bounded crash-loop
history) to `--json`, which writes each as it comes; a text or HTML report, and `--last`,
hold at most MAX_HELD incidents, task tables capped, and say what they left out.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import TextIO

from oomwatch.cgroup_identity import annotate
from oomwatch.diagnosis.history import History
from oomwatch.diagnosis.trends import CRASH_LOOP_WINDOW_S
from oomwatch.incident import Incident
from oomwatch.report import filters, jsonout
from oomwatch.report.inputs import KMSG_PATH, Loaded, Stream, load_kmsg, open_file, open_store
from oomwatch.report.sniff import InputError
from oomwatch.report.unread import unread_notice, unread_warnings
from oomwatch.store.limits import capped

MAX_HELD = 1000  # incidents held for a text or HTML report, or for --last


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Exit status: 0 whether or not kills were found; 1 when lines that plainly belong to"
        " an OOM kill could not be decoded (the report lists them); 2 when the input cannot be"
        " read (the message names it)."
    )
    parser.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="a saved log (dmesg, dmesg -T, kern.log/syslog, journalctl -k or -o json/export,"
        " raw /dev/kmsg, pasted text; gzip, UTF-16 and CRLF are recognised by content);"
        " '-' reads stdin; default: the live kernel log",
    )
    parser.add_argument("--store", metavar="DIR", help="read the daemon's incident store in DIR")
    parser.add_argument("--json", action="store_true", help="print the JSON contract instead")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    parser.add_argument("--since", metavar="WHEN", help="only kills after WHEN: 2h, 30m, 1d or ISO")
    parser.add_argument(
        "--details", action="store_true", help="every incident in full, however many there are"
    )
    parser.add_argument(
        "--pod", metavar="POD", help="only this pod: name, namespace/name, UID or its first 8+"
    )
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
        loaded = stream.loaded
        seen: deque[Incident] = deque(maxlen=MAX_HELD)  # for --pod's "the pods it has"
        keep = (lambda i: seen.append(filters.pod_facts(i))) if args.pod else _ignore
        diagnosed = _diagnosed(stream.incidents, keep)
        shown = filters.selected(diagnosed, since, args.pod, loaded.warn)
        if args.last is not None:  # the newest N: only they are held
            shown = iter(_held(shown, min(args.last, MAX_HELD), loaded, "--last"))
        if args.json and not args.html:
            # Nothing is written before the first incident (or the end): an input that
            # cannot be read is then an error alone, not half a document.
            first = next(shown, None)
            rest = shown if first is None else itertools.chain((first,), shown)

            def at_end() -> list[str]:
                return [*loaded.all_warnings(), *_json_notes(args, loaded, seen, source)]

            _write(lambda out: jsonout.write(out, rest, at_end))
            return 1 if loaded.unread else 0
        incidents = _held(shown, MAX_HELD, loaded, "the report")
    except InputError as exc:
        return _fail(str(exc))
    if loaded.forms:
        source += f" ({', '.join(loaded.forms)})"
    warnings = loaded.all_warnings()
    # What the text and HTML say in place of "no OOM kills found", and the JSON as warnings.
    notice: list[str] = []
    also_json: list[str] = []
    if loaded.unread:  # kill lines in the input, but no kill decoded from them
        notice = unread_notice(source, loaded.unread)
        also_json = unread_warnings(source, loaded.unread)
    if args.pod and seen and not incidents:
        missed = filters.no_pod_notice(list(seen), args.pod)
        notice = [*notice, *missed]
        also_json.append(" ".join(line.strip() for line in missed))
    if args.html:
        from oomwatch.report import page

        try:
            with open(args.html, "w", encoding="utf-8") as fh:
                fh.write(
                    page.render(incidents, warnings, source, notice=notice, details=args.details)
                )
        except OSError as exc:
            return _fail(f"cannot write {args.html}: {exc.strerror or exc}")
    if args.json:
        _write(lambda out: out.write(jsonout.render(incidents, [*warnings, *also_json])))
        return 1 if loaded.unread else 0
    from oomwatch.report import text  # its formatting modules: not for `--json`

    rendered = text.render(
        incidents, warnings, source, notice=notice, details=args.details, width=_width()
    )
    _write(lambda out: out.write(rendered))
    return 1 if loaded.unread else 0


def _json_notes(
    args: argparse.Namespace, loaded: Loaded, seen: deque[Incident], source: str
) -> list[str]:
    """The notices a streamed `--json` adds as warnings once the input is read."""
    if loaded.forms:
        source += f" ({', '.join(loaded.forms)})"
    notes = unread_warnings(source, loaded.unread) if loaded.unread else []
    if args.pod and seen and not any(filters.pod_matches(i, args.pod) for i in seen):
        notes.append(" ".join(line.strip() for line in filters.no_pod_notice(list(seen), args.pod)))
    return notes


def _ignore(incident: Incident) -> None:
    """Without --pod nothing reads the pods seen: no copy of each incident's pod facts."""


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
        ring = load_kmsg(args.kmsg)
        stream = Stream(iter(ring.incidents), Loaded([], ring.warnings))
        source = f"the kernel log ({args.kmsg})"
    return Stream((annotate(i) for i in stream.incidents), stream.loaded), source


def _diagnosed(
    incidents: Iterable[Incident], seen: Callable[[Incident], object]
) -> Iterator[Incident]:
    """Each incident diagnosed with the earlier kills of its workload (crash-loop history),
    as the agent diagnoses it before storing it.  One the agent stored diagnosed is shown as
    it was diagnosed, so the report says what the Event, the log line and the metrics said;
    records of agents before 0.2 (no verdict) are diagnosed here."""
    history = History()
    for incident in incidents:
        diagnosed = incident if incident.verdict is not None else history.diagnose(incident)
        seen(diagnosed)
        yield diagnosed
        history.remember(incident)


def _held(incidents: Iterable[Incident], limit: int, loaded: Loaded, what: str) -> list[Incident]:
    """The newest `limit` incidents, task tables and notes capped as the store caps them
    (oomwatch.store.limits); a warning says how many older ones were left out."""
    held: deque[Incident] = deque(maxlen=limit)
    count = 0
    for incident in incidents:
        held.append(capped(incident))
        count += 1
    if count > limit and limit == MAX_HELD:
        loaded.warn(
            f"{what} holds the newest {MAX_HELD} of {count} incidents; narrow it with --since,"
            " --pod or --last, or use --json, which streams every one"
        )
    return list(held)


def _fail(message: str) -> int:
    sys.stderr.write(f"oomwatch report: {message}\n")
    return 2


def _width() -> int | None:
    """The terminal's width to wrap the advice to; None when stdout is no terminal."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None
