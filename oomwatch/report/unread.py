"""Lines that plainly belong to an OOM kill, kept (a few, with their line numbers) while a log
streams past, so a report that decodes no kill from them can say what it could not read
instead of "no OOM kills found".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from oomwatch.incident import Incident

MAX_LINES = 5  # of each sign
MAX_LINE_CHARS = 240
# (needle searched for, what a line must contain to count): the search is one C-speed pass
# per needle, and stops once enough lines are kept.
_INVOKED = ("oom-kill", ("invoked oom-killer", "oom-kill:constraint"))
_KILLED = ("Kill", ("Killed process ", "Kill process "))


@dataclass
class Signs:
    """The first lines of a log that say an OOM killer ran (`invoked`) or killed (`killed`)."""

    invoked: list[tuple[int, str]] = field(default_factory=list)
    killed: list[tuple[int, str]] = field(default_factory=list)
    _lines_before: int = 0  # lines in the pieces already seen

    def feed(self, piece: str) -> None:
        """Look through the next piece of the log (pieces end at a newline)."""
        full = True
        for (needle, musts), kept in ((_INVOKED, self.invoked), (_KILLED, self.killed)):
            if len(kept) < MAX_LINES:
                self._find(piece, needle, musts, kept)
                full = full and len(kept) >= MAX_LINES
        if not full:
            self._lines_before += piece.count("\n")

    def _find(
        self, piece: str, needle: str, musts: tuple[str, ...], kept: list[tuple[int, str]]
    ) -> None:
        pos = piece.find(needle)
        while pos >= 0 and len(kept) < MAX_LINES:
            start = piece.rfind("\n", 0, pos) + 1
            end = piece.find("\n", pos)
            end = len(piece) if end < 0 else end
            line = piece[start:end]
            if any(must in line for must in musts):
                line_no = self._lines_before + piece.count("\n", 0, start) + 1
                kept.append((line_no, line.strip()[:MAX_LINE_CHARS]))
            pos = piece.find(needle, end)

    def unread(self, incidents: Sequence[Incident]) -> list[tuple[int, str]]:
        """The kept lines no incident accounts for: every one when nothing was decoded, the
        kill lines when no decoded incident has a victim (or, for a pre-5.1 report cut after
        its `Kill process ... sacrifice child` line, the process it selected); sorted."""
        if not incidents:
            return sorted(self.invoked + self.killed)
        if not any(i.victims or i.selected_pid is not None for i in incidents):
            return sorted(self.killed)
        return []


def unread_warnings(name: str, lines: Sequence[tuple[int, str]]) -> list[str]:
    """One warning per line (the `--json` form of the text report's list)."""
    return [
        f"{name}: line {line_no} looks like an OOM kill but could not be decoded: {text}"
        for line_no, text in lines
    ]


def unread_notice(name: str, lines: Sequence[tuple[int, str]]) -> list[str]:
    """What the text and HTML report say instead of "no OOM kills found"."""
    return [
        f"No OOM kill could be decoded from {name}, but these lines plainly belong to one:",
        *(f"  line {line_no}: {text}" for line_no, text in lines),
        "oomwatch cannot read their format yet; please report them (with the lines around"
        " them) as an oomwatch issue.",
    ]
