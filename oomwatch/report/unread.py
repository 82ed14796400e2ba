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
# What a line must contain to count.  Every such line holds a report anchor of
# `decode.scan` (" invoked oom-killer", "oom-kill:", "Killed process ", "ill process "), so
# the scanner that finds the report windows shows it to `Signs.see`: no pass of its own.
_INVOKED = ("invoked oom-killer", "oom-kill:constraint")
_KILLED = ("Killed process ", "Kill process ")


@dataclass
class Signs:
    """The first lines of a log that say an OOM killer ran (`invoked`) or killed (`killed`)."""

    invoked: list[tuple[int, str]] = field(default_factory=list)
    killed: list[tuple[int, str]] = field(default_factory=list)

    def see(self, line_no: int, line: str) -> None:
        """Look at the next line the scanner parsed (`TextScanner(line_observer=...)`)."""
        if len(self.invoked) >= MAX_LINES and len(self.killed) >= MAX_LINES:
            return  # both kept in full
        for musts, kept in ((_INVOKED, self.invoked), (_KILLED, self.killed)):
            if len(kept) < MAX_LINES and any(must in line for must in musts):
                kept.append((line_no, line.strip()[:MAX_LINE_CHARS]))

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
