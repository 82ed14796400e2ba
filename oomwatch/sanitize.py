"""Make untrusted text (process names, cgroup paths, pod-written files) safe to show.

Any pod chooses its process names; a name with a newline or an escape sequence must not
forge a log line, an Event note or a terminal colour, and one with bidi overrides or
invisible characters must not show as another name (`evil\u202egnp.exe` displays as
`evilexe.png`).  Every sink that shows such text runs it through `escape_control` first.
"""

from __future__ import annotations

import re

# Every control (Cc), format (Cf) and line/paragraph separator (Zl, Zp) character of
# Unicode 15: C0, DEL, C1; soft hyphen and the script format signs; zero-width space and
# joiners, LRM/RLM and the Arabic letter mark; the bidi embeddings, overrides (LRE..RLO) and
# isolates (LRI..PDI); the word joiner and invisible operators; the BOM; the interlinear
# annotation marks; and the invisible tag characters (U+E0000 block).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f]"
)


def escape_control(text: str) -> str:
    """Replace control, bidi and invisible format characters with `\\xNN`/`\\uNNNN`."""
    if text.isascii() and text.isprintable():  # the common case, in C: nothing to escape
        return text
    return _UNSAFE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
