"""When a forecast becomes a warning, and when the warning ends (pure state per container).

A warning starts only after the forecast has held for `persist_s` (one evaluation is never
enough to speak), and ends only after `clear_s` without it, so a forecast that flickers
around its threshold gives one warning, not a stream of them.  In between, the time left is
the latest forecast's, counted down.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from oomwatch.forecast.model import DEFAULT_HORIZON_S, Forecast, Outlook

PERSIST_S = 5.0
CLEAR_S = 30.0

Change = Literal["started", "cleared"]


@dataclass(frozen=True, slots=True)
class Episode:
    """One container's warning state."""

    started_at_s: float | None = None  # the warning in force since then (None: no warning)
    first: Forecast | None = None  # the forecast that started it
    last: Forecast | None = None  # the latest forecast that warned
    pending_since_s: float | None = None  # forecasts have warned since then, not long enough
    quiet_since_s: float | None = None  # during a warning: none has warned since then
    reason: str = ""  # the latest outlook's basis, or why it did not warn

    @property
    def warning(self) -> bool:
        return self.started_at_s is not None

    def seconds_to_oom(self, now_s: float) -> float | None:
        """During a warning, the latest forecast counted down to now; else None."""
        if self.last is None or self.started_at_s is None:
            return None
        return max(0.0, self.last.seconds_to_oom - (now_s - self.last.at_s))


def step(
    episode: Episode,
    seen: Outlook | None,
    now_s: float,
    horizon_s: float = DEFAULT_HORIZON_S,
    *,
    persist_s: float = PERSIST_S,
    clear_s: float = CLEAR_S,
) -> tuple[Episode, Change | None]:
    """The episode after one evaluation (`seen` None: the container was not evaluated, as
    its memory did not grow), and whether a warning started or cleared."""
    reason = seen.reason if seen is not None else "no samples to forecast from"
    if seen is not None and seen.warns(horizon_s):
        forecast = seen.forecast
        if episode.warning:
            return replace(episode, last=forecast, quiet_since_s=None, reason=reason), None
        pending = episode.pending_since_s if episode.pending_since_s is not None else now_s
        if now_s - pending < persist_s:
            return replace(episode, pending_since_s=pending, reason=reason), None
        started = Episode(now_s, forecast, forecast, None, None, reason)
        return started, "started"
    if not episode.warning:
        return Episode(reason=reason), None
    quiet = episode.quiet_since_s if episode.quiet_since_s is not None else now_s
    if now_s - quiet < clear_s:
        return replace(episode, quiet_since_s=quiet, reason=reason), None
    return Episode(reason=reason), "cleared"
