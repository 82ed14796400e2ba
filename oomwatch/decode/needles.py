"""The lines of a text that hold any of a few literal needles, found in one pass if possible.

`TextScanner` looks for report anchors in logs of many megabytes that are mostly chatter.
`str.find` is a C loop, but one pass per needle: six needles over a 72 MB log cost about
0.22 s, most of the report path's time (bench/report_path.py, bench/RESULTS.md).  Hyperscan
(the optional `fast` extra: `pip install 'oomwatch[fast]'`) matches all needles in one
vectorised pass, about 30 ms there.  Without it (not installed, not x86-64, or its database
fails to build) the same lines are found with one `str.find` pass per needle: the result is
the same either way (tests/decode/test_needles.py runs the corpus through both).

Hyperscan reads bytes.  A caller that holds the UTF-8 bytes its text was decoded from hands
them over (`utf8`), and they are searched in place: no encoded copy of the text is made.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, AnyStr


class Needles:
    """Finds the start offset of every line holding at least one of `needles`."""

    def __init__(self, needles: Sequence[str], accelerate: bool = True) -> None:
        """`accelerate=False` keeps to `str.find` (the fallback, for tests and comparison)."""
        if not needles or any("\n" in n or "?" in n or not n.isascii() or not n for n in needles):
            raise ValueError("needles must be non-empty ASCII text without newlines or `?`")
        self.needles = tuple(needles)
        self._hyperscan = _hyperscan_database(self.needles) if accelerate else None
        self.accelerated = self._hyperscan is not None

    def line_starts(
        self, text: str, utf8: bytes | memoryview | None = None, start: int = 0
    ) -> list[int]:
        """Sorted, distinct offsets in `text` of the lines that hold a needle, from `start`
        (0 or a line's start) on.

        `utf8`: `text[start:]` as UTF-8 (`utf8.decode() == text[start:]`), if the caller holds
        it: the bytes it was decoded from, or a view of them.  Hyperscan searches them then,
        not a copy."""
        if self._hyperscan is None:
            return _by_find(text, self.needles, start)
        if utf8 is None:
            return _by_hyperscan(text, self._hyperscan, start)
        return _in_utf8(text, utf8, self._hyperscan, start)


def _by_find(text: str, needles: tuple[str, ...], start: int) -> list[int]:
    starts: set[int] = set()
    find, rfind = text.find, text.rfind
    for needle in needles:
        pos = find(needle, start)
        while pos >= 0:
            starts.add(rfind("\n", 0, pos) + 1)
            end = find("\n", pos)
            if end < 0:
                break
            pos = find(needle, end)  # the rest of this line is already taken
    return sorted(starts)


def _by_hyperscan(text: str, database: Any, start: int) -> list[int]:
    # One byte per character, so that byte offsets are character offsets: ASCII text
    # (str.isascii() is O(1) in CPython) encodes by copying; any other character becomes
    # `?`, which no needle holds (`Needles`), so no needle is found or lost by it.  Text
    # with a character past U+00FF is encoded a character at a time (unicode_encode_ucs1).
    data = (text[start:] if start else text).encode("ascii", "replace")
    return _line_starts(text, "\n", _ends(data, database), start)


def _in_utf8(text: str, utf8: bytes | memoryview, database: Any, start: int) -> list[int]:
    # In UTF-8 an ASCII byte is only ever that character (every byte of a longer one is
    # 0x80 or more), so the bytes hold an ASCII needle exactly where the text does.
    ends = _ends(utf8, database)
    if text.isascii():  # one byte per character: the offsets are the text's, from `start`
        return _line_starts(text, "\n", ends, start)
    data = bytes(utf8)
    return _char_offsets(data, _line_starts(data, b"\n", ends), start)


def _ends(data: bytes | memoryview, database: Any) -> list[int]:
    """The sorted end offsets of the needles' matches in `data`."""
    ends: list[int] = []
    database.scan(data, match_event_handler=_collector(ends))
    ends.sort()
    return ends


def _char_offsets(utf8: bytes, starts: list[int], offset: int) -> list[int]:
    """The character offsets (plus `offset`) of sorted byte offsets of line starts in UTF-8
    text.

    Each is its byte offset less the bytes that the characters before it take beyond one.
    The stretches between line starts are whole characters; the ASCII ones (most of a log,
    told by `isascii`, a word at a time) take none beyond one and are not decoded."""
    offsets: list[int] = []
    previous, surplus = 0, -offset
    for start in starts:
        stretch = utf8[previous:start]
        if not stretch.isascii():
            surplus += len(stretch) - len(stretch.decode())
        offsets.append(start - surplus)
        previous = start
    return offsets


def _line_starts(text: AnyStr, newline: AnyStr, ends: list[int], offset: int = 0) -> list[int]:
    """The distinct line starts of sorted offsets (each plus `offset`).  Each backward search
    stops at the previous offset: from 0 it went back over the whole line per match, and a
    hostile megabyte line holding thousands of needles took seconds
    (tests/decode/test_properties)."""
    rfind = text.rfind
    starts: list[int] = []
    start, previous = offset, offset
    for end in ends:
        end += offset
        newline_at = rfind(newline, previous, end)
        if newline_at >= 0:
            start = newline_at + 1
        if not starts or starts[-1] != start:
            starts.append(start)
        previous = end
    return starts


def _collector(ends: list[int]) -> Callable[..., None]:
    def on_match(_id: int, _from: int, to: int, _flags: int, _context: object) -> None:
        ends.append(to)  # a match's end offset: its line starts after the newline before it

    return on_match


def _hyperscan_database(needles: tuple[str, ...]) -> Any:
    """A block-mode database matching the needles literally, or None without hyperscan."""
    try:
        import hyperscan  # optional, untyped C extension (ignore_missing_imports)
    except ImportError:
        return None
    try:
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        database.compile(
            expressions=[re.escape(n).encode() for n in needles],
            ids=list(range(len(needles))),
            flags=[0] * len(needles),
        )
    except Exception:  # hyperscan.error: e.g. a CPU without the instructions it needs
        return None
    return database
