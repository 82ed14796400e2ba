"""The streaming line reader: same lines as a plain split, bounded line length, any block size."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomwatch.report import inputs


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=17))
def test_lines_match_a_plain_split(data: bytes, block: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(inputs, "READ_BLOCK_BYTES", block)
        mp.setattr(inputs, "MAX_LINE_BYTES", 10_000)
        got = list(inputs._lines(io.BytesIO(data), "x", inputs._LineStats()))
    expected = data.decode("utf-8", "replace").split("\n")
    if expected and expected[-1] == "":
        expected.pop()
    assert got == expected


def test_long_lines_are_cut_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "READ_BLOCK_BYTES", 4)
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 8)
    stats = inputs._LineStats()
    data = b"short\n" + b"x" * 50 + b"\nafter\n" + b"y" * 9
    got = list(inputs._lines(io.BytesIO(data), "x", stats))
    assert got[0] == "short" and got[2] == "after"
    assert len(got[1]) <= 12 and got[1].startswith("xxxx")
    assert stats.cut == 2 and len(got) == 4
