"""Where the reports in a log can be: the anchor lines every report line kind holds, and
the line-aligned windows around them that `TextScanner` feeds to the parsers.

A report runs from its opening lines to its kill lines; the lines between (stack, meminfo,
stats, task table) hold no anchor, so each anchor's window reaches on (its fill) to the next
anchor, up to a bound.  A piece of a log settles all but its last few lines, which may lead
into a report in the next piece.
"""

from __future__ import annotations

import re

from oomwatch.decode.context import ORPHAN_LEAD_LINES
from oomwatch.decode.needles import Needles
from oomwatch.decode.piece_bytes import PieceBytes, needle_line_starts

# Lines that can open a report or sit before its kill: the text between one of these and
# the next anchor is part of the report (stack trace, meminfo, stats), up to a limit.
_OPENING = (
    " invoked oom-killer",
    "killed as a result of limit of",
    "Memory limit reached of cgroup",
    "memory: usage ",
    "Memory cgroup stats for ",
    "oom-killer: gfp_mask=",
)
# The task table can be long (every process of a node in a global OOM).
_TABLE = ("Tasks state (memory values", "uid  tgid total_vm")
# Lines that only ever follow the opening ones (the gap after them is chatter).
_CLOSING = (
    "oom-kill:",
    "Killed process ",
    "ill process ",
    "memory.oom.group set",
    "oom_reaper: reaped process ",
    "is already exiting",
    "memory and no killable processes",
    "not syncing: System is deadlocked on memory",
    "not syncing: Out of memory",
    "oom_kill_process: ",
)
# A closing line that does not end the way a whole kernel line ends may go on over the next
# lines (a mail client's or a console's wrap, `forwarded`): its window runs this much further.
_WRAP_FILL_CHARS = 512
_WHOLE_END = re.compile(
    r"(?:oom_score_adj:-?\d+|,uid=\d+|shmem-rss:\d+kB|oom\.group set|the task|processes)\s*$"
)
# A few short needles that every anchor contains (one pass for all, see `needles`); each
# hit's line is then checked for the anchors themselves.
_NEEDLE_SEARCH = Needles(
    ("oom-k", "emory", "process", "killed as a result", "uid  tgid", "already exiting")
)
# The most a report may run from an opening line to the next anchor: a stack trace and
# meminfo (even per-CPU lines of a large machine) or a task table of ~40k processes.  A
# report cut short (no kill line) thus costs at most this much line-by-line parsing.
MAX_FILL_CHARS = 256 << 10
MAX_TABLE_FILL_CHARS = 4 << 20
# Lines taken before a window's first anchor: task rows of a grep-filtered fragment (and
# the prose a paste may have between them and their report).
_LEAD_LINES = ORPHAN_LEAD_LINES


def _line_fill(line: str) -> int | None:
    """How far a report may run after this line; None if it is no anchor line."""
    # The largest fill of any anchor in the line: the table's, an opening's, a closing's.
    for anchor in _TABLE:
        if anchor in line:
            return MAX_TABLE_FILL_CHARS
    for anchor in _OPENING:
        if anchor in line:
            return MAX_FILL_CHARS
    for anchor in _CLOSING:
        if anchor in line:
            return 0 if _WHOLE_END.search(line) is not None else _WRAP_FILL_CHARS
    return None


def anchor_hits(
    text: str, piece: PieceBytes | None = None, begin: int = 0
) -> list[tuple[int, int]]:
    """(line offset, how far the report may run after it) of every anchor line from `begin`
    on, sorted."""
    hits: list[tuple[int, int]] = []
    find = text.find
    for start in needle_line_starts(_NEEDLE_SEARCH, text, piece, begin):
        end = find("\n", start)
        fill = _line_fill(text[start : len(text) if end < 0 else end])
        if fill is not None:
            hits.append((start, fill))
    return hits


def report_windows(text: str, hits: list[tuple[int, int]], begin: int = 0) -> list[tuple[int, int]]:
    """Merged [start, end) line-aligned spans covering every report (text from `begin` on)."""
    spans: list[tuple[int, int]] = []
    rfind, floor = text.rfind, _floor(begin)
    for index, (pos, fill) in enumerate(hits):
        start = rfind("\n", floor, pos) + 1
        for _ in range(_LEAD_LINES):
            if start == begin:
                break
            start = rfind("\n", floor, start - 1) + 1
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        if fill:
            following = hits[index + 1][0] if index + 1 < len(hits) else len(text)
            stop = min(following, pos + fill)
            fill_end = text.find("\n", stop)
            end = max(end, len(text) if fill_end < 0 else fill_end + 1)
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


def settled_end(text: str, begin: int = 0) -> int:
    """Where the last `_LEAD_LINES` lines (and any unterminated rest) of a piece begin (the
    text from `begin` on).

    Those lines may lead into a report whose anchor is in the next piece, so whether they
    belong to a window is not known yet.
    """
    floor = _floor(begin)
    start = text.rfind("\n", floor) + 1
    for _ in range(_LEAD_LINES):
        if start == begin:
            break
        start = text.rfind("\n", floor, start - 1) + 1
    return start


def _floor(begin: int) -> int:
    """Where a backward search for a line's start stops, for a text taken from `begin` on (0
    or a line's start): at the newline before it, which gives `begin` as the line's start."""
    return begin - 1 if begin else 0


def bridge_end(text: str) -> int:
    """The end of the first `_LEAD_LINES + 1` lines of a piece, or -1 where it has fewer:
    once they are scanned, the lines a scan carries over are all the piece's own."""
    end = 0
    for _ in range(_LEAD_LINES + 1):
        end = text.find("\n", end) + 1
        if not end:
            return -1
    return end
