"""Make untrusted text (process names, cgroup paths, pod-written files) safe to show.

Any pod chooses its process names; a name with a newline or an escape sequence must not
forge a log line, an Event note or a terminal colour.  Every sink that shows such text runs
it through `escape_control` first.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_control(text: str) -> str:
    """Replace control characters (C0, DEL, C1, line separators) with `\\xNN`/`\\uNNNN`."""

    def _esc(match: re.Match[str]) -> str:
        code = ord(match.group(0))
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"

    return _CONTROL.sub(_esc, text)
