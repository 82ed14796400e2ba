"""Logs built from the real corpus reports, for report tests that need many kills.

`three_hundred_kills()` is what a node with a crash-looping pod looks like after an hour: the
kill of corpus 02 (a pod at its 100 MiB limit) over and over, and between them the kills of
the other corpus files that hold exactly one kill each (a group kill, node-wide kills,
docker and systemd cgroups, ...).  Every line is a corpus line re-stamped as
`dmesg -T` (so each kill has a wall-clock time), one kill every 12 s.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from oomwatch.decode import decode_text, parse_lines

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
START = datetime(2026, 11, 20, 9, 0, 0, tzinfo=UTC)
CRASH_LOOP = "02"
EVERY_OTHER = 6  # one kill of another file after each five of the crash loop
# The other kills come from the first 30 corpus files (the public set the screenshots and
# row counts were drawn for); later corpus files would change what the table holds.
OTHERS_FROM = 30


def _messages(path: Path) -> list[str]:
    return [r.message for r in parse_lines(path.read_text().split("\n")) if "\n" not in r.message]


def _stamped(messages: list[str], at: datetime) -> str:
    stamp = at.strftime("[%a %b %d %H:%M:%S %Y]")
    return "".join(f"{stamp} {message}\n" for message in messages)


def _one_kill(messages: list[str]) -> bool:
    incidents = decode_text(_stamped(messages, START)).incidents
    return len(incidents) == 1 and incidents[0].victim is not None


def _number(path: Path) -> int:
    """A corpus file's number (`NN-`, three digits from 100 on): files in corpus order."""
    return int(path.name.split("-", 1)[0])


def three_hundred_kills(total: int = 300) -> str:
    """The log (text); decoding it gives exactly `total` incidents, each with a kill."""
    crash = _messages(next(CORPUS.glob(f"{CRASH_LOOP}-*.log")))
    crash = crash[: [n for n, m in enumerate(crash) if "invoked oom-killer" in m][1]]
    others = [
        m
        for path in sorted(CORPUS.glob("*.log"), key=_number)[:OTHERS_FROM]
        if not path.name.startswith(CRASH_LOOP) and _one_kill(m := _messages(path))
    ]
    blocks = []
    for n in range(total):
        messages = others[(n // EVERY_OTHER) % len(others)] if n % EVERY_OTHER == 3 else crash
        blocks.append(_stamped(messages, START + timedelta(seconds=12 * n)))
    return "".join(blocks)
