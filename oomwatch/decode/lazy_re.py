"""Patterns compiled when first used, for the line formats a given log may never contain.

The decoder knows many formats (syslog, journal, dmesg -T in any locale, Talos, pastes); a log
is mostly one of them.  Compiling every pattern at import would be about a tenth of `oomwatch
report`'s start-up; a pattern made here costs nothing until the first line that needs it.
"""

from __future__ import annotations

import re
from typing import Any, cast, overload

# What callers may ask of a pattern; after the first use they are the compiled pattern's own.
_ATTRIBUTES = (
    "match",
    "fullmatch",
    "search",
    "sub",
    "subn",
    "split",
    "findall",
    "finditer",
    "pattern",
    "flags",
    "groups",
    "groupindex",
)


class _LazyPattern:
    """`re.compile(pattern, flags)` once an attribute is first asked for; from then on the
    compiled pattern's methods are this object's attributes (no call in between)."""

    def __init__(self, pattern: str | bytes, flags: int) -> None:
        self._source: tuple[Any, int] = (pattern, flags)  # str or bytes, as re.compile takes

    def __getattr__(self, name: str) -> Any:  # only for attributes not set yet
        compiled = re.compile(*self._source)
        for attribute in _ATTRIBUTES:
            setattr(self, attribute, getattr(compiled, attribute))
        return getattr(compiled, name)


@overload
def lazy_compile(pattern: str, flags: int = 0) -> re.Pattern[str]: ...
@overload
def lazy_compile(pattern: bytes, flags: int = 0) -> re.Pattern[bytes]: ...
def lazy_compile(pattern: str | bytes, flags: int = 0) -> re.Pattern[Any]:
    """A pattern that behaves as `re.compile(pattern, flags)`, compiled on first use."""
    return cast("re.Pattern[Any]", _LazyPattern(pattern, flags))
