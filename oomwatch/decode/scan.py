"""Batch decoding of whole logs: find the report windows fast, parse only those lines.

A large log is mostly ordinary kernel chatter.  Instead of running the line parsers over
every line, `TextScanner` searches the text for a few literal anchors that every report
line kind contains (one vectorised pass, `needles`), widens each hit to whole lines, fills
the span from a report's opening lines to its kill lines (stack, meminfo, task table), and
feeds just those windows (`windows`) through the same `LineParser` + `ReportAssembler` that
`decode_lines` and the daemon use.  The text may come in pieces (a file streamed in chunks):
what a piece cannot settle yet (its last lines, which may lead into a report in the next
piece, and how far the last anchor's fill still runs) is carried over, so the pieces decode
exactly like the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from oomwatch.decode.assembler import ReportAssembler
from oomwatch.decode.line_keys import LINE_KEYS
from oomwatch.decode.needles import Needles
from oomwatch.decode.piece_bytes import PieceBytes, window_utf8
from oomwatch.decode.prefixes import LineParser
from oomwatch.decode.records import LogRecord
from oomwatch.decode.stamps import Reference, YearClock
from oomwatch.decode.windows import anchor_hits, bridge_end, report_windows, settled_end
from oomwatch.incident import Incident

# A line of chatter in dmesg's default form (`[ 12.345678] msg`) that neither the line
# parser nor the assembler can take for anything but an ignorable record: no key the
# assembler looks for, no `host kernel: ` (journalctl short-monotonic), no end the parser
# undoes (`$` marks, a tmux marker, blanks), no glued login prompt, not long.  Runs of such
# lines inside a window are skipped while the assembler ignores them (`_feed_window`).
# Digits are ASCII ones (a Unicode `\d` costs a table look-up per digit): a stamp of other
# digits only makes its line no chatter, and a line that is not chatter is fed.  The
# repeats are possessive (`+`): `[^\n]` cannot pass a line's end, so the only place a line
# can end is where the possessive run stops, and giving characters back could find no other
# match; without the bookkeeping for giving back, a run is matched about twice as fast.
_CHATTER_TIME = r"[0-9]{1,12}\.[0-9]{1,9}"
_CHATTER_MESSAGE = r"\] [^\s\[][^\n]{0,4000}+(?<![\s\]$])"
_CHATTER_BODY = rf"\[ {{0,12}}{_CHATTER_TIME}{_CHATTER_MESSAGE}"
# One line's shape, its stamp's seconds captured (`LineParser.feed_chatter` builds its record).
_CHATTER_SHAPE = re.compile(rf"\[ {{0,12}}({_CHATTER_TIME}){_CHATTER_MESSAGE}")
# Whole chatter-shaped lines from a line start on (one C match per run).
_CHATTER_RUN = re.compile(rf"(?:{_CHATTER_BODY}\n)*+")
_CHATTER_KEY_SEARCH = Needles((*LINE_KEYS, "kernel:", "login: ", "OOMKilling"))


@dataclass
class DecodeResult:
    """Incidents in log order, and what the decoder could not make sense of."""

    incidents: list[Incident] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def decode_lines(lines: Iterable[str], reference: Reference | None = None) -> DecodeResult:
    """Decode log lines in any supported format, every line through the line parsers.

    `reference`: a time the log was written no later than (its file's modification time,
    the time of reading), which dates stamps that print no year (`stamps.YearClock`).
    """
    clock = YearClock(reference)
    parser = LineParser(clock)
    assembler = ReportAssembler(complete_log=False, clock=clock)
    incidents: list[Incident] = []
    for line_no, line in enumerate(lines, 1):
        for record in parser.feed(line, line_no):
            incidents.extend(assembler.feed(record))
    for record in parser.finish():
        incidents.extend(assembler.feed(record))
    incidents.extend(assembler.flush())
    return DecodeResult(incidents, parser.warnings + assembler.warnings)


def utf8_text(data: bytes, offset: int = 0) -> tuple[str, str | None]:
    """The text of `data` (a log, or a piece of one at byte `offset`), and a warning if it
    held invalid UTF-8: undecodable bytes become U+FFFD instead of stopping the decode."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as error:
        warning = (
            f"input is not valid UTF-8 (first bad byte at offset {offset + error.start}); "
            "undecodable bytes were replaced"
        )
        return data.decode("utf-8", "replace"), warning


def decode_kmsg_records(records: Iterable[bytes]) -> DecodeResult:
    """Decode /dev/kmsg records (one read() each), e.g. the whole backlog at start-up."""
    assembler = ReportAssembler()
    incidents: list[Incident] = []
    for raw in records:
        incidents.extend(assembler.feed_kmsg(raw))
    incidents.extend(assembler.flush())
    return DecodeResult(incidents, assembler.warnings)


class TextScanner:
    """Decode a log given as one text or in consecutive pieces, with the same result.

    `feed(piece)` any number of times, then `close(last_piece)` for the result.  Memory
    stays bounded by the piece size: only the last few lines are carried to the next piece.
    """

    def __init__(
        self,
        reference: Reference | None = None,
        line_observer: Callable[[int, str], None] | None = None,
    ) -> None:
        """`reference`: as for `decode_lines`.  `line_observer(line_no, line)` sees every line
        that is parsed (each report window's, but for runs of chatter that hold none of
        the assembler's keys; every anchor line is seen), once, in order."""
        self._observer = line_observer
        clock = YearClock(reference)
        self._parser = LineParser(clock)
        self._assembler = ReportAssembler(complete_log=False, clock=clock)
        self._first_piece = True
        self._incidents: list[Incident] = []
        self._tail = ""  # the lines not settled yet (see `settled_end`)
        self._tail_line_no = 1  # line number of the tail's first line
        # How many characters into the tail the last anchor's fill still reaches (None: none).
        self._reach: int | None = None
        self._window_open = False  # the line before the tail was fed; its window may go on
        # The chatter record `_feed_chatter` left the parser holding (None once handed on).
        self._held_chatter: LogRecord | None = None

    def feed(self, text: str, utf8: bytes | None = None) -> None:
        """Add the next piece of the log (cut anywhere; whole lines are cheapest).

        `utf8`: the bytes `text` was decoded from, where the caller holds them and they are
        its UTF-8 form exactly (`utf8.decode() == text`): searched in place of a copy."""
        bridge = bridge_end(text) if self._tail else -1
        if bridge < 0:
            self._scan(self._tail + text, final=False, piece=self._piece(text, utf8))
            return
        # Fed as two pieces (which decode like one): its first lines joined to the lines
        # carried over, a copy of a few lines; then what that scan carries is the text's own,
        # so the rest is scanned in place from there instead of copied whole after them.
        self._scan(self._tail + text[:bridge], final=False, piece=None)
        begin = bridge - len(self._tail)
        piece = None if utf8 is None else PieceBytes(0, text, utf8)
        self._scan(text, final=False, piece=piece, begin=begin)

    def close(self, text: str = "", utf8: bytes | None = None) -> DecodeResult:
        """Add the last piece and return everything decoded (and not taken yet)."""
        self._scan(self._tail + text, final=True, piece=self._piece(text, utf8))
        self._end_window()
        self._incidents.extend(self._assembler.flush())
        return self.take()

    def take(self) -> DecodeResult:
        """The incidents and warnings decoded since the last `take()`, handed over: a caller
        that takes after each piece holds one piece's worth, however long the log."""
        result = DecodeResult(self._incidents, self._parser.warnings + self._assembler.warnings)
        self._incidents = []
        self._parser.warnings = []
        self._assembler.warnings = []
        return result

    def _piece(self, text: str, utf8: bytes | None) -> PieceBytes | None:
        return None if utf8 is None else PieceBytes(len(self._tail), text, utf8)

    def _scan(self, text: str, final: bool, piece: PieceBytes | None, begin: int = 0) -> None:
        """Scan `text` from `begin` on: 0, or where the lines carried over start in it (a
        line's start, see `windows.settled_end`)."""
        settled = len(text) if final else settled_end(text, begin)
        if settled == begin:
            self._tail = text[begin:]
            return
        if self._first_piece:  # journalctl's banner line dates the log (see `stamps`)
            self._first_piece = False
            newline = text.find("\n", begin)
            self._parser.banner(text[begin : newline if newline >= 0 else len(text)])
        hits = anchor_hits(text, piece, begin)
        if self._reach is not None and (not hits or hits[0][0] > begin):
            hits.insert(0, (begin, self._reach))  # the fill of an anchor in an earlier piece
        line_no, counted_to = self._tail_line_no, begin
        for start, end in report_windows(text, hits, begin):
            if start >= settled:
                break
            if start > begin:
                self._end_window()
            line_no += text.count("\n", counted_to, start)
            counted_to = min(end, settled)
            utf8 = window_utf8(piece, start, counted_to)
            line_no = self._feed_window(text[start:counted_to], line_no, utf8)
            self._window_open = True
            if end < settled:
                self._end_window()
        self._tail = text[settled:]
        self._tail_line_no = line_no + text.count("\n", counted_to, settled)
        last = next(((pos, fill) for pos, fill in reversed(hits) if pos < settled), None)
        reach = last[0] + last[1] - settled if last is not None and last[1] else -1
        self._reach = reach if reach >= 0 else None

    def _feed_window(self, window: str, line_no: int, utf8: memoryview | None = None) -> int:
        """Feed a window's lines; of a run of chatter lines (`_CHATTER_SHAPE`, no key) only
        the first and the last while the assembler ignores keyless records.  Returns the
        number of the line after the window's last newline (its lines are counted here once).

        The same records reach the assembler that matter to it: the first line of a run
        releases the record held before it, the last leaves the parser as the whole run
        would (a record held, nothing pending to join), and the lines between would each
        be held, released and ignored.  Runs and keys are found in C (one match per run,
        one needle pass per window), so a window that is mostly chatter costs little more
        than its copy.
        """
        keyed = _CHATTER_KEY_SEARCH.line_starts(window, utf8)
        next_keyed = 0  # index into `keyed` of the first key line at or after `pos`
        find, count = window.find, window.count
        chatter_run = _CHATTER_RUN.match
        size = len(window)
        pos = 0
        while pos < size:
            eol = find("\n", pos)
            eol = size if eol < 0 else eol
            line = window[pos:eol]
            while next_keyed < len(keyed) and keyed[next_keyed] <= pos:
                next_keyed += 1
            has_key = next_keyed > 0 and keyed[next_keyed - 1] == pos
            shape = _CHATTER_SHAPE.fullmatch(line)
            if has_key or shape is None:
                if shape is None or line_no == 1 or "kernel: " in line or "login: " in line:
                    self._feed_line(line, line_no)
                else:  # a report line in dmesg's default form: only its record is built
                    self._feed_chatter(line, line_no, shape, keyless=False)
                pos, line_no = eol + 1, line_no + 1
                continue
            # A chatter line: the run goes on to the next line that is not chatter.
            # (up to the next key line: a match is never longer than the run it finds)
            stop = keyed[next_keyed] if next_keyed < len(keyed) else size
            run = chatter_run(window, eol + 1, stop) if eol < size else None
            run_end = eol + 1 if run is None else run.end()
            last = window.rfind("\n", eol + 1, run_end - 1) + 1  # the run's last line
            if line_no == 1:
                self._feed_line(line, line_no)  # the first line may be a banner
            elif last <= eol + 1 or not self._run_skippable():
                self._feed_chatter(line, line_no, shape)
            pos, line_no = eol + 1, line_no + 1
            if last <= pos:
                continue  # one or two lines: fed one by one
            while pos < last and not self._assembler.ignores_keyless():
                eol = find("\n", pos)
                self._feed_line(window[pos:eol], line_no)
                pos, line_no = eol + 1, line_no + 1
            if pos < last:
                line_no += count("\n", pos, last)
                pos = last
        # A last line without its newline was numbered above, but the next line is its own.
        return line_no - 1 if window and window[-1] != "\n" else line_no

    def _run_skippable(self) -> bool:
        """Whether a run of three or more chatter lines may be skipped from its first line
        on (its last is fed).  Feeding the first would release the held record and hold its
        own, which the run's last line releases to an assembler that ignores it: so once the
        held record is released here, if the assembler ignores keyless records and has no
        orphan rows that the first line could clear, the first line changes nothing."""
        self._end_window_record()
        return self._assembler.ignores_keyless_run()

    def _feed_line(self, line: str, line_no: int) -> None:
        if self._observer is not None:
            self._observer(line_no, line)
        self._hand_on(self._parser.feed(line, line_no))

    def _feed_chatter(
        self, line: str, line_no: int, shape: re.Match[str], keyless: bool = True
    ) -> None:
        """`_feed_line` for a line of `_CHATTER_SHAPE` (neither `kernel: ` nor `login: ` in
        it, not the first): the parser holds its record without trying every log format;
        a `keyless` one the assembler sees as such when it comes out
        (`ReportAssembler.feed_keyless`), unless the parser changed it (a wrap joined to it
        makes another record)."""
        if self._observer is not None:
            self._observer(line_no, line)
        released = self._parser.feed_chatter(line, line_no, shape.end(1) + 2, float(shape.group(1)))
        if released:
            self._hand_on(released)
        if keyless:
            self._held_chatter = self._parser.held

    def _hand_on(self, records: list[LogRecord]) -> None:
        """Give the records the parser released to the assembler."""
        for record in records:
            if record is self._held_chatter:
                self._held_chatter = None
                self._incidents.extend(self._assembler.feed_keyless(record))
            else:
                self._incidents.extend(self._assembler.feed(record))

    def _end_window(self) -> None:
        if self._window_open:
            self._end_window_record()
            self._window_open = False

    def _end_window_record(self) -> None:
        """Hand the record the parser holds (waiting for a wrap or continuation) on."""
        self._hand_on(self._parser.finish())


def decode_text(data: str | bytes, reference: Reference | None = None) -> DecodeResult:
    """Decode a whole log (any supported format, or a mix) into incidents.

    Same result as `decode_lines(text.splitlines())`, but only the lines around OOM report
    anchors are parsed, which is what makes a large log fast to scan.
    """
    text, warning = (data, None) if isinstance(data, str) else utf8_text(data)
    result = TextScanner(reference).close(text)
    if warning is not None:
        result.warnings.insert(0, warning)
    return result
