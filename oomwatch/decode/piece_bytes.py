"""A piece of a log with the bytes it was decoded from, and the needle searches that read
them in place of an encoded copy of the text (`needles`).

`TextScanner` scans the lines it carried over from the last piece joined with the next one:
the bytes it is given are those of the joined text from the piece's offset on.
"""

from __future__ import annotations

from oomwatch.decode.needles import Needles


class PieceBytes:
    """The piece a scanned text ends with, and its UTF-8 form.  (A plain class: a dataclass
    costs its `exec` at every start of `oomwatch report`.)"""

    __slots__ = ("start", "text", "utf8")

    def __init__(self, start: int, text: str, utf8: bytes) -> None:
        self.start = start  # the piece's offset in the scanned text
        self.text = text
        self.utf8 = utf8  # `text`'s UTF-8 form exactly: `utf8.decode() == text`


def needle_line_starts(
    needles: Needles, text: str, piece: PieceBytes | None, begin: int = 0
) -> list[int]:
    """`needles.line_starts(text, start=begin)`, reading the piece's bytes where that is exact.

    No needle holds a newline: where the carried lines end with one (pieces cut at a line's
    end, as `oomwatch report` cuts them), they and the piece are searched apart."""
    if piece is None or (piece.start and text[piece.start - 1] != "\n"):
        return needles.line_starts(text, start=begin)
    if not piece.start:  # the text is the piece's (scanned in place from `begin`)
        return needles.line_starts(text, _utf8_from(piece, begin), begin)
    found = needles.line_starts(piece.text, piece.utf8)
    carried = needles.line_starts(text[: piece.start], start=begin)
    return carried + [piece.start + s for s in found]


def _utf8_from(piece: PieceBytes, start: int) -> bytes | memoryview:
    """The bytes of `piece.text[start:]` (a view of the piece's)."""
    if not start:
        return piece.utf8
    skip = start if piece.text.isascii() else len(piece.text[:start].encode())
    return memoryview(piece.utf8)[skip:]


def window_utf8(piece: PieceBytes | None, start: int, end: int) -> memoryview | None:
    """The bytes of the scanned text's [start, end) where they are the piece's and its
    offsets are theirs (ASCII), else None: a view, not a copy."""
    if piece is None or start < piece.start or not piece.text.isascii():
        return None
    return memoryview(piece.utf8)[start - piece.start : end - piece.start]
