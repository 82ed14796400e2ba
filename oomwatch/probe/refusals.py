"""Refusals of probe files, logged without letting a pod flood the agent's log.

1,000 junk files touched every second would make 1,000 lines a second and rotate the
agent's own kill lines out of `kubectl logs`: the first `REFUSAL_LINES` refusals a minute
are logged one line each, the rest counted in one summary line (at most one each
`REFUSAL_SUMMARY_S`), and a file refused again unchanged is not logged again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from oomwatch.sanitize import escape_control

REFUSAL_LINES = 16  # refusals logged one line each per minute; the rest summarised
REFUSAL_SUMMARY_S = 10.0


class RefusalLog:
    """`refuse()` each refusal, `summarise()` once per walk; lines go to `log`."""

    def __init__(self, log: logging.Logger, clock: Callable[[], float]) -> None:
        self._log = log
        self._clock = clock
        self._logged: dict[tuple[str, str], tuple[int, int]] = {}
        self._refused: dict[str, int] = {}  # reasons of refusals not logged one by one
        self._lines_left, self._lines_at_s = REFUSAL_LINES, clock()
        self._summary_at_s = clock() - REFUSAL_SUMMARY_S  # the first summary comes at once

    def refuse(
        self, name: str, reason: str, version: tuple[int, int], what: str = "refused"
    ) -> None:
        key = (name, reason)
        if self._logged.get(key) == version:
            return
        if len(self._logged) > 4096:
            self._logged.clear()
        self._logged[key] = version
        now = self._clock()
        if now - self._lines_at_s >= 60.0:
            self._lines_left, self._lines_at_s = REFUSAL_LINES, now
        if self._lines_left <= 0:
            short = reason[:80]
            if short in self._refused or len(self._refused) < 16:
                self._refused[short] = self._refused.get(short, 0) + 1
            return
        self._lines_left -= 1
        self._log.warning(  # probe_file_refused or probe_file_trimmed
            f"probe_file_{what}",
            extra={"file_name": escape_control(name), "reason": escape_control(reason)},
        )

    def summarise(self) -> None:
        """One line for the refusals not logged one by one since the last such line."""
        now = self._clock()
        if not self._refused or now - self._summary_at_s < REFUSAL_SUMMARY_S:
            return
        reasons = sorted(self._refused.items(), key=lambda kv: -kv[1])[:5]
        self._log.warning(
            "probe_files_refused",
            extra={
                "files": sum(self._refused.values()),
                "reasons": {escape_control(r): n for r, n in reasons},
                "since_s": round(now - self._summary_at_s, 1),
            },
        )
        self._refused, self._summary_at_s = {}, now
