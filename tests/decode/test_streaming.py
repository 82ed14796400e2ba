"""A log decoded in pieces (how `oomwatch report` streams a file) gives exactly what the
whole text gives, wherever the pieces are cut: mid-report, mid-line, mid-task-table.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomwatch.decode import DecodeResult, TextScanner, decode_lines, decode_text

CORPUS = sorted((Path(__file__).resolve().parent.parent / "data" / "corpus").glob("*.log"))
CHATTER = (
    "[ 5000.000001] eth0: renamed from veth1234",
    "[ 5000.000002] IPv6: ADDRCONF(NETDEV_CHANGE): cali99: link becomes ready",
    "May 19 18:14:43 node kernel: EXT4-fs (sda1): mounted filesystem",
    "",
    "    indented continuation of something else",
)


def _pieces(text: str, cuts: list[int]) -> DecodeResult:
    scanner = TextScanner()
    last = 0
    for cut in sorted(set(cuts)):
        scanner.feed(text[last:cut])
        last = cut
    return scanner.close(text[last:])


def _same(a: DecodeResult, b: DecodeResult) -> None:
    assert [i.to_dict() for i in a.incidents] == [i.to_dict() for i in b.incidents]
    assert a.warnings == b.warnings


def _line_cuts(text: str, every: int) -> list[int]:
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    return starts[every::every]


def test_corpus_is_there() -> None:
    assert len(CORPUS) == 115


@pytest.mark.parametrize("path", CORPUS, ids=[p.name.split("-", 1)[0] for p in CORPUS])
def test_corpus_file_in_pieces(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    whole = decode_text(text)
    _same(whole, decode_lines(text.split("\n")))
    for every in (1, 2, 5):
        _same(_pieces(text, _line_cuts(text, every)), whole)
    for size in (1, 97, 4096):
        _same(_pieces(text, list(range(size, len(text), size))), whole)


def _synthetic(seed: int) -> str:
    """Every corpus report between runs of chatter, plus an over-long line inside a report
    (its warning carries a line number) and a long task table (a fill across many pieces)."""
    rng = random.Random(seed)
    parts: list[str] = []
    for path in CORPUS:
        parts.extend(rng.choice(CHATTER) for _ in range(rng.randrange(0, 9)))
        lines = path.read_text(encoding="utf-8").rstrip("\n").split("\n")
        if path.name.startswith("02"):
            lines.insert(3, "[ 1.0] " + "x" * 20_000)
        if path.name.startswith("20"):  # a global report: the task table of a whole node
            table = next(i for i, line in enumerate(lines) if "[  pid  ]" in line or "tgid" in line)
            lines[table + 1 : table + 1] = [lines[table + 1]] * 300
        parts.extend(lines)
    return "\n".join(parts) + "\n"


SYNTHETIC = _synthetic(5)


def test_synthetic_log_fast_scan_equals_line_by_line() -> None:
    whole = decode_text(SYNTHETIC)
    assert len(whole.incidents) >= 35
    assert any(w.startswith("line ") for w in whole.warnings)  # line numbers are compared
    _same(whole, decode_lines(SYNTHETIC.split("\n")))


@settings(
    max_examples=int(os.environ.get("OOMWATCH_HYPOTHESIS_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(st.integers(0, len(SYNTHETIC)), max_size=60), st.integers(200, 5000))
def test_synthetic_log_in_random_pieces(cuts: list[int], step: int) -> None:
    """Random cut points, plus a cut every `step` characters: reports straddle the cuts."""
    cuts += list(range(step, len(SYNTHETIC), step))
    _same(_pieces(SYNTHETIC, cuts), decode_text(SYNTHETIC))


def test_piece_with_no_settled_line_waits_for_more() -> None:
    text = CORPUS[1].read_text(encoding="utf-8")
    scanner = TextScanner()
    for line in text.splitlines(keepends=True):
        scanner.feed("")
        scanner.feed(line)
    _same(scanner.close(), decode_text(text))
