"""`oomwatch report [FILE|-] [--store DIR] [--json] [--html FILE] [--details] [--since]
[--pod] [--last]`.

Without FILE or --store it reads the live kernel ring (/dev/kmsg backlog).  Exit 0 whether
or not kills were found; exit 1 when the input has lines that plainly belong to an OOM kill
but no kill could be decoded from them (the report lists them); exit 2 with a message naming
the input when it cannot be read.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timedelta

from oomwatch.cgroup_identity import annotate
from oomwatch.diagnosis import diagnose
from oomwatch.diagnosis.trends import CRASH_LOOP_WINDOW_S, incident_time_s
from oomwatch.incident import Incident
from oomwatch.report import filters, jsonout, text
from oomwatch.report.inputs import KMSG_PATH, Loaded, load_file, load_kmsg, load_store
from oomwatch.report.sniff import InputError
from oomwatch.report.unread import unread_notice, unread_warnings


def configure(parser: argparse.ArgumentParser) -> None:
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
        loaded, source, history = _load(args, since)
    except InputError as exc:
        return _fail(str(exc))
    incidents = [diagnose(i, history) for i in loaded.incidents]
    warnings = list(loaded.warnings)
    # What the text and HTML say in place of "no OOM kills found", and the JSON as warnings.
    notice: list[str] = []
    also_json: list[str] = []
    if loaded.unread:  # kill lines in the input, but no kill decoded from them
        notice = unread_notice(source, loaded.unread)
        also_json = unread_warnings(source, loaded.unread)
    if not args.store:  # the store already filtered in SQL
        shown, extra = filters.apply(incidents, since, args.pod, args.last)
        warnings.extend(extra)
        if args.pod and incidents and not shown:
            missed = filters.no_pod_notice(incidents, args.pod)
            notice = [*notice, *missed]
            also_json.append(" ".join(line.strip() for line in missed))
        incidents = shown
    if args.html:
        from oomwatch.report import page

        try:
            with open(args.html, "w", encoding="utf-8") as fh:
                fh.write(
                    page.render(incidents, warnings, source, notice=notice, details=args.details)
                )
        except OSError as exc:
            return _fail(f"cannot write {args.html}: {exc.strerror or exc}")
    out = (
        jsonout.render(incidents, [*warnings, *also_json])
        if args.json
        else text.render(incidents, warnings, source, notice=notice, details=args.details)
    )
    try:
        sys.stdout.write(out)
        sys.stdout.flush()
    except BrokenPipeError:  # `oomwatch report | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the exit-time flush quiet
    return 1 if loaded.unread else 0


def _load(args: argparse.Namespace, since: datetime | None) -> tuple[Loaded, str, list[Incident]]:
    """The incidents to show (annotated), a name for the input, and the crash-loop history."""
    if args.store:
        loaded = load_store(args.store, since, args.pod, args.last)
        history = _store_history(args.store, loaded.incidents)
        return loaded, f"store {args.store}", history
    if args.file:
        loaded = load_file(args.file)
        source = "stdin" if args.file == "-" else args.file
        if loaded.forms:
            source += f" ({', '.join(loaded.forms)})"
    else:
        loaded = load_kmsg(args.kmsg)
        source = f"the kernel log ({args.kmsg})"
    loaded.incidents = [annotate(i) for i in loaded.incidents]
    return loaded, source, loaded.incidents


def _store_history(state_dir: str, shown: list[Incident]) -> list[Incident]:
    """Earlier kills from the store that a filter hid but crash-loop detection needs."""
    times = [t for i in shown if (t := incident_time_s(i)) is not None and i.wall_time]
    if not times:
        return shown
    start = datetime.fromtimestamp(min(times)).astimezone() - timedelta(seconds=CRASH_LOOP_WINDOW_S)
    try:
        return load_store(state_dir, start, None, None).incidents
    except InputError:
        return shown


def _fail(message: str) -> int:
    sys.stderr.write(f"oomwatch report: {message}\n")
    return 2
