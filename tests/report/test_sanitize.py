"""Untrusted names cannot move the cursor, forge lines, or display as another name."""

from __future__ import annotations

import unicodedata

import pytest

from oomwatch.sanitize import escape_control

SPOOFING = [
    *map(chr, range(0x200B, 0x2010)),  # zero-width space, joiners, LRM, RLM
    *map(chr, range(0x202A, 0x202F)),  # LRE, RLE, PDF, LRO, RLO
    *map(chr, range(0x2060, 0x2065)),  # word joiner, invisible operators
    *map(chr, range(0x2066, 0x206A)),  # LRI, RLI, FSI, PDI
    "\ufeff",  # zero-width no-break space (BOM)
    "\u061c",  # Arabic letter mark
    "\u2028",
    "\u2029",
]


@pytest.mark.parametrize("char", SPOOFING, ids=lambda c: f"U+{ord(c):04X}")
def test_bidi_and_invisible_characters_are_escaped(char: str) -> None:
    escaped = escape_control(f"java{char}x")
    assert escaped == f"java\\u{ord(char):04x}x"


def test_rlo_cannot_reverse_a_name() -> None:
    assert escape_control("evil\u202egnp.exe") == "evil\\u202egnp.exe"


def test_controls_and_c1_are_escaped() -> None:
    assert escape_control("a\x1b[2J\nb\x7f\x9b") == "a\\x1b[2J\\x0ab\\x7f\\x9b"


def test_every_ascii_character_alone_and_in_text() -> None:
    """Plain ASCII text skips the pattern: only C0 and DEL may change it."""
    for code in range(128):
        char = chr(code)
        expected = f"\\x{code:02x}" if code < 0x20 or code == 0x7F else char
        assert escape_control(char) == expected, code
        assert escape_control(f"pod-{char}-1") == f"pod-{expected}-1", code


def test_visible_text_is_kept() -> None:
    text = "pod-ä/コンテナ (pid 1) Ωmega 🙂 -1000 – \u00a0"
    assert escape_control(text) == text


def test_tag_characters_are_escaped_in_full() -> None:
    assert escape_control("a\U000e0041b") == "a\\U000e0041b"


def test_no_control_format_or_separator_character_passes() -> None:
    """Every Cc, Cf, Zl and Zp character this Python's Unicode database knows is escaped."""
    passed = [
        f"U+{code:04X}"
        for code in range(0x110000)
        if unicodedata.category(chr(code)) in ("Cc", "Cf", "Zl", "Zp")
        and escape_control(chr(code)) == chr(code)
    ]
    assert passed == []
