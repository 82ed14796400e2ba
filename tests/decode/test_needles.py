"""One pass for all needles (hyperscan) finds exactly the lines one `str.find` pass per needle
finds, so the report is the same with or without the optional accelerator; and the same
again where it searches the UTF-8 bytes the text was decoded from (its offsets made the
text's) instead of an encoded copy."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomwatch.decode import decode_text, windows
from oomwatch.decode.needles import Needles

CORPUS = sorted((Path(__file__).resolve().parent.parent / "data" / "corpus").glob("*.log"))
NEEDLES = windows._NEEDLE_SEARCH.needles
FAST, PLAIN = Needles(NEEDLES), Needles(NEEDLES, accelerate=False)


def _both(text: str) -> list[int]:
    """The lines both searches find, given the text alone and (where it has a UTF-8 form)
    with its bytes, and with a view of them that starts inside a larger buffer."""
    found = FAST.line_starts(text)
    assert found == PLAIN.line_starts(text)
    try:
        utf8 = text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return found
    assert FAST.line_starts(text, utf8) == found
    assert FAST.line_starts(text, memoryview(b"\xe7\x94" + utf8)[2:]) == found
    assert PLAIN.line_starts(text, utf8) == found
    # from the second line on (how a piece is scanned in place after the lines it carried)
    start = text.find("\n") + 1
    rest = [offset for offset in found if offset >= start]
    for needles in (FAST, PLAIN):
        assert needles.line_starts(text, start=start) == rest
        assert needles.line_starts(text, text[start:].encode(), start) == rest
    return found


def test_the_accelerator_is_in_use_where_the_suite_installs_it() -> None:
    if platform.machine() != "x86_64":
        pytest.skip("hyperscan wheels are x86-64 only; the str.find path serves elsewhere")
    assert windows._NEEDLE_SEARCH.accelerated, "dev.sh installs the `fast` extra (hyperscan)"


@pytest.mark.parametrize("path", CORPUS, ids=[p.name.split("-", 1)[0] for p in CORPUS])
def test_both_searches_find_the_same_lines_in_every_real_log(path: Path) -> None:
    found = _both(path.read_text(encoding="utf-8"))
    expected = json.loads((path.parent / "expected" / (path.stem + ".json")).read_text("utf-8"))
    assert found or not expected["incidents"]  # only a near miss (no report) finds nothing


def test_offsets_are_characters_in_text_that_is_not_ascii() -> None:
    text = "Mär 3 knoten kernel: ☃ ünrelated\nMär 3 knoten kernel: ☃ python3 invoked oom-killer\nx"
    assert _both(text) == [text.index("Mär 3 knoten kernel: ☃ python3")]


def test_offsets_after_lines_of_two_three_and_four_byte_characters() -> None:
    """Byte offsets in the UTF-8 form become character offsets across ASCII stretches and
    lines of every width of character, a needle before, on and after each of them."""
    lines = [
        "[ 1.0] Killed process 1 (a)",
        "[ 1.1] \u751f\u6210rpm\u65f6 \u5185\u5b58",
        "[ 1.2] oom-kill: on a line after CJK",
        "[ 1.3] caf\xe9 process \U0001f600 emoji, then the needle on the same line",
        "[ 1.4] plain chatter",
        "[ 1.5] \U0001f600\U0001f600 \u2019 \xa0",
        "[ 1.6] Memory cgroup out of memory",
    ]
    text = "\n".join(lines)
    assert _both(text) == [text.index(lines[n]) for n in (0, 2, 3, 6)]


def test_many_needles_on_one_line_give_that_line_once_and_an_unended_last_line_counts() -> None:
    text = "chatter\n" + "process " * 1000 + "\nmore chatter\nMemory cgroup out of memory"
    assert _both(text) == [8, text.rindex("\n") + 1]


# Characters of one to four UTF-8 bytes between needles and newlines.
_PIECES = st.sampled_from(
    ["\n", "x", "ü", "\u751f", "\U0001f600", "process ", "Killed process", "oom-k"]
)


@given(st.lists(_PIECES))
def test_line_starts_are_those_of_a_line_by_line_search(pieces: list[str]) -> None:
    """Against the plainest definition, in text that crowds needles, newlines and non-ASCII."""
    text = "".join(pieces)
    starts, offset = [], 0
    for line in text.split("\n"):
        if any(n in line for n in NEEDLES):
            starts.append(offset)
        offset += len(line) + 1
    assert _both(text) == starts


def test_text_without_a_utf8_form_is_searched_like_any_other() -> None:
    text = "a\udcff\nKilled process 1 (x)\n"  # a lone surrogate has no UTF-8 form
    assert _both(text) == [3]


def test_bad_needles_are_refused() -> None:
    for needles in ((), ("a\nb",), ("",), ("ü",), ("a?",)):  # `?` stands for non-ASCII
        with pytest.raises(ValueError):
            Needles(needles)


@pytest.mark.parametrize("path", CORPUS[::8], ids=[p.name.split("-", 1)[0] for p in CORPUS[::8]])
def test_the_report_decodes_the_same_without_the_accelerator(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = path.read_text(encoding="utf-8")
    fast = decode_text(text)
    monkeypatch.setattr(windows, "_NEEDLE_SEARCH", Needles(NEEDLES, accelerate=False))
    plain = decode_text(text)
    assert [i.to_dict() for i in fast.incidents] == [i.to_dict() for i in plain.incidents]
    assert fast.warnings == plain.warnings
