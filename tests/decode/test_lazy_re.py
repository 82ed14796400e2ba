"""A pattern compiled on first use answers as the compiled one does, from the first call on."""

from __future__ import annotations

import re

from oomwatch.decode.lazy_re import lazy_compile


def _found(match: re.Match[str] | None) -> tuple[tuple[int, int], tuple[str | None, ...]] | None:
    return None if match is None else (match.span(), match.groups())


def test_a_lazy_pattern_matches_as_the_compiled_one_and_compiles_once() -> None:
    lazy = lazy_compile(r"(\d+) (?P<word>\w+)", re.I)
    compiled = re.compile(r"(\d+) (?P<word>\w+)", re.I)
    assert "match" not in vars(lazy)  # nothing compiled before the first use
    for text in ("12 apples", "x 12 apples", ""):
        assert _found(lazy.match(text)) == _found(compiled.match(text))
        assert _found(lazy.search(text)) == _found(compiled.search(text))
    assert lazy.sub("#", "1 a, 2 b") == compiled.sub("#", "1 a, 2 b")
    assert (lazy.pattern, lazy.flags, lazy.groups) == (compiled.pattern, compiled.flags, 2)
    assert vars(lazy)["match"].__self__ is vars(lazy)["search"].__self__  # one compile


def test_a_lazy_bytes_pattern_matches_bytes() -> None:
    lazy = lazy_compile(rb"(\d{1,3}),(\d+);")
    assert "match" not in vars(lazy)
    match = lazy.match(b"6,42;text")
    assert match is not None and match.groups() == (b"6", b"42")
