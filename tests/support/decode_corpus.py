"""Real corpus reports and a hypothesis strategy that mutates them, for the decoder's
property tests (tests/decode: bad input never raises; fast paths decode as the general one)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from oomwatch.decode import DecodeResult, TextScanner

CORPUS = sorted((Path(__file__).resolve().parent.parent / "data" / "corpus").glob("*.log"))
CORPUS_LINES = [p.read_text(encoding="utf-8").split("\n") for p in CORPUS]
# OOMWATCH_HYPOTHESIS_EXAMPLES raises the search for a longer local run.
SETTINGS = settings(
    max_examples=int(os.environ.get("OOMWATCH_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def mutated_corpus(draw: st.DrawFn) -> list[str]:
    """A corpus report with lines dropped, repeated, cut, swapped or replaced by junk."""
    lines = list(draw(st.sampled_from(CORPUS_LINES)))
    for _ in range(draw(st.integers(0, 12))):
        if not lines:
            break
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(
            st.sampled_from(["drop", "repeat", "cut", "swap", "junk", "bytes", "bignum", "long"])
        )
        if action == "drop":
            del lines[index]
        elif action == "repeat":
            lines.insert(index, lines[index])
        elif action == "cut":
            lines[index] = lines[index][: draw(st.integers(0, len(lines[index])))]
        elif action == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        elif action == "bignum":  # a number far past 64 bits where the kernel prints one
            # (at most three: count=0 would replace every number, and in a megabyte "long"
            # line that made a line of hundreds of megabytes -- one CI run spent 571 s here)
            digits = "9" * draw(st.integers(1, 6000))
            lines[index] = re.sub(r"\d+", digits, lines[index], count=draw(st.integers(1, 3)))
        elif action == "long":  # a version of a real line up to a megabyte long (never more:
            # the same line may be picked again, and repeating a repeat grows without bound)
            times = min(draw(st.integers(2, 20000)), (1 << 20) // max(len(lines[index]), 1))
            lines[index] = lines[index] * max(times, 1)
        elif action == "junk":
            lines[index] = draw(st.text(max_size=200))
        else:
            raw = draw(st.binary(max_size=200))
            lines[index] = raw.decode("utf-8", "replace")
    if draw(st.booleans()):
        lines = lines[: draw(st.integers(0, len(lines)))]  # a truncated report
    return lines


def decoded_in_pieces(text: str, cuts: list[int], utf8: bool = False) -> DecodeResult:
    """The text fed in pieces; with `utf8`, each with its bytes (as `oomwatch report` does)."""
    scanner = TextScanner()
    last = 0
    for cut in sorted(set(cuts)):
        piece = text[last:cut]
        scanner.feed(piece, piece.encode() if utf8 else None)
        last = cut
    return scanner.close(text[last:], text[last:].encode() if utf8 else None)


def assert_same_result(a: DecodeResult, b: DecodeResult) -> None:
    assert [i.to_dict() for i in a.incidents] == [i.to_dict() for i in b.incidents]
    assert a.warnings == b.warnings


def line_cuts(text: str, every: int) -> list[int]:
    """The start of every `every`-th line (cut points at line starts)."""
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    return starts[every::every]
