"""The streaming file reader: pieces that end at newlines, bounded line length, any block and
piece size, and the same incidents as decoding the whole file at once."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.report_cli import corpus_files

from oomwatch.decode import Reference, decode_lines, decode_text
from oomwatch.report import inputs
from oomwatch.report.sniff import decode_bytes


def _pieces(data: bytes, stats: inputs._ReadStats | None = None) -> list[str]:
    """The pieces' texts; the bytes handed with each must be its UTF-8 form exactly."""
    blocks = inputs._blocks(io.BytesIO(data), "x")
    pieces = list(inputs._pieces(blocks, stats or inputs._ReadStats()))
    assert all(utf8 is None or utf8.decode() == text for text, utf8 in pieces)
    return [text for text, _ in pieces]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(1, 17), st.integers(1, 40))
def test_pieces_join_to_the_input(data: bytes, block: int, chunk: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(inputs, "READ_BLOCK_BYTES", block)
        mp.setattr(inputs, "CHUNK_BYTES", chunk)
        mp.setattr(inputs, "MAX_LINE_BYTES", 10_000)
        stats = inputs._ReadStats()
        pieces = _pieces(data, stats)
    assert "".join(pieces) == decode_bytes(data)
    assert all(p.endswith("\n") for p in pieces[:-1])
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        assert stats.not_utf8 is not None and f"byte {error.start})" in stats.not_utf8
    else:
        assert stats.not_utf8 is None


# Bytes the cleaned text differs from (colour, odd spaces, stray and cut characters) and bytes
# it does not (another escape, other characters): a piece hands on only bytes that are its text.
_ODD = "\xa0\u202f\u2007\u2019\u751f\xe9"
_FRAGMENTS = st.sampled_from(
    [b"x", b"\n", b"\x1b[1;31m", b"\x1b[0m", b"\x1b(", b"\xff", b"\xe2\x80", *map(str.encode, _ODD)]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=40), st.integers(1, 17), st.integers(1, 40))
def test_cleaned_pieces_hand_bytes_only_that_are_their_text(
    fragments: list[bytes], block: int, chunk: int
) -> None:
    data = b"".join(fragments)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(inputs, "READ_BLOCK_BYTES", block)
        mp.setattr(inputs, "CHUNK_BYTES", chunk)
        _pieces(data, inputs._ReadStats(clean=True))  # asserts it of every piece


def test_a_piece_hands_its_bytes_where_they_are_its_text() -> None:
    handed = {
        b"plain\n": True,
        "\u751f\u6210 CJK, \u2019quoted\u2019 and \xe9\n".encode(): True,
        b"escape that is not colour \x1b(\n": True,
        b"\x1b[31mred\x1b[0m\n": False,  # cleaned: the text has fewer characters
        "no\xa0break\n".encode(): False,
        b"stray \xff byte\n": False,  # read as Windows-1252: not the bytes' UTF-8 text
    }
    for data, expected in handed.items():
        [(text, utf8)] = inputs._pieces([data], inputs._ReadStats(clean=True))
        assert (utf8 is not None) == expected, data
        assert utf8 is None or utf8.decode() == text


def test_long_lines_are_cut_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "READ_BLOCK_BYTES", 4)
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 8)
    stats = inputs._ReadStats()
    data = b"short\n" + b"x" * 50 + b"\nafter\n" + "é".encode() * 9
    got = "".join(_pieces(data, stats)).split("\n")
    assert got[0] == "short" and got[2] == "after"
    assert len(got[1]) <= 12 and got[1].startswith("xxxx")
    assert got[3] == "éééé"  # cut before a character, not inside it
    assert stats.cut == 2 and got[4:] == [""]
    assert stats.not_utf8 is None


def test_bad_utf8_offset_counts_skipped_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "READ_BLOCK_BYTES", 4)
    monkeypatch.setattr(inputs, "MAX_LINE_BYTES", 8)
    stats = inputs._ReadStats()
    data = b"y" * 30 + b"\nok\n\xff\n"
    _pieces(data, stats)
    bad = data.index(b"\xff")
    assert stats.not_utf8 is not None and f"byte {bad})" in stats.not_utf8


def _load(path: Path) -> inputs.Loaded:
    return inputs.load_file(str(path))


@pytest.mark.parametrize("chunk", [1, 300, 4096])
def test_load_file_in_tiny_pieces_equals_whole_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, chunk: int
) -> None:
    """Every corpus report, one after the other, read in pieces that cut through them."""
    log = tmp_path / "all.log"
    # a stray byte on a line of its own first (at the end it could pass for a wrapped tail)
    log.write_bytes(b"\xff\n" + b"".join(p.read_bytes() for p in corpus_files()))
    data = log.read_bytes()
    monkeypatch.setattr(inputs, "READ_BLOCK_BYTES", 97)
    monkeypatch.setattr(inputs, "CHUNK_BYTES", chunk)
    streamed = _load(log)
    mtime = Reference(log.stat().st_mtime, "the file's modification time")  # as load_file
    whole = decode_text(data, mtime)
    lines = decode_lines(data.decode("utf-8", "replace").split("\n"), mtime)
    assert [i.to_dict() for i in streamed.incidents] == [i.to_dict() for i in whole.incidents]
    assert [i.to_dict() for i in whole.incidents] == [i.to_dict() for i in lines.incidents]
    # the same warnings, but the first: a stray byte is read as Windows-1252 when streamed
    assert streamed.warnings[1:] == whole.warnings[1:]
    assert "not all UTF-8" in streamed.warnings[0] and "not valid UTF-8" in whole.warnings[0]
