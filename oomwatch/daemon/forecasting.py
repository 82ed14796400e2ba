"""The agent's pre-OOM forecast on the cgroup worker's thread: the forecaster
(oomwatch.forecast) wired to the samples and the kernel's pressure reports.

`ForecastWatch.observe` runs after each sample pass.  A cheap look at each container's last
two minutes picks the few whose unreclaimable memory grows towards their limit; only those
get the full forecast over their sampled timeline, and their pressure watched.  What changed
(a warning started or cleared, the countdown, a container gone, the word on one) comes back
as values (`forecast_news`); the loop records them (`forecast_stage`).  Nothing here raises
into its caller.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from oomwatch.cgroups.discovery import WatchedCgroup
from oomwatch.cgroups.pressure import PressureWatch
from oomwatch.daemon.forecast_news import (
    ContainerGone,
    Countdown,
    ForecastChange,
    ReasonSaid,
    WarningCleared,
    WarningStarted,
)
from oomwatch.forecast import DEFAULT_HORIZON_S, Outlook, outlook, unreclaimable_bytes
from oomwatch.forecast.episodes import Episode, step
from oomwatch.forecast.model import MIN_RISE_SHARE
from oomwatch.incident import Timeline, TimelineSample
from oomwatch.stages import EventLogger

log = logging.getLogger("oomwatch.forecast")

TREND_STEP_S = 10.0  # the cheap look keeps one point per 10 s ...
TREND_STEP_SLACK_S = 0.5  # (a container far from its limit is sampled about every 10 s)
TREND_KEEP_S = 130.0  # ... for this long
TREND_MIN_S = 50.0  # and needs this much of it
PRESSURE_RELEASE_S = 120.0  # a container's pressure is watched this long after it last grew
REASON_KEEP_S = 600.0  # a gone container's last word is kept this long for its kill
NOT_GROWING = "no sustained growth seen"
ATTEND_S = 120.0  # a container growing or warned of is sampled every second this long

TimelineFor = Callable[[str, float], Timeline | None]
Attend = Callable[[list[str], float], None]
"""(cgroups, for how long) -> sample them every interval."""


@dataclass(slots=True)
class _Track:
    trend: deque[tuple[float, int]] = field(default_factory=deque)  # (t, unreclaimable)
    episode: Episode = field(default_factory=Episode)
    grew_at_s: float = 0.0

    def note(self, t_s: float, value: int) -> None:
        if not self.trend or t_s - self.trend[-1][0] >= TREND_STEP_S - TREND_STEP_SLACK_S:
            self.trend.append((t_s, value))
        while self.trend and self.trend[0][0] < t_s - TREND_KEEP_S:
            self.trend.popleft()

    def growing(self, sample: TimelineSample, value: int, horizon_s: float) -> bool:
        """Unreclaimable memory peaked higher in the last minute than the one before, fast
        enough to near the limit: worth a forecast (peaks, so a leak under a sawtooth counts)."""
        limit = sample.limit_bytes
        if not limit or not self.trend:
            return False
        span_s = sample.t_seconds - self.trend[0][0]
        if span_s < TREND_MIN_S:
            return False
        middle_s = self.trend[0][0] + span_s / 2
        older = max(v for t, v in self.trend if t < middle_s)
        newer = max([value, *(v for t, v in self.trend if t >= middle_s)])
        rise = newer - older
        if rise < MIN_RISE_SHARE * limit / 2:
            return False
        return (limit - newer) / (rise / (span_s / 2)) <= 2 * horizon_s


class ForecastWatch:
    """(Cgroup worker thread) forecasts for the sampled containers; what changed, as values."""

    def __init__(
        self,
        *,
        timeline_for: TimelineFor,
        logger: EventLogger,
        horizon_s: float = DEFAULT_HORIZON_S,
        pressure: PressureWatch | None = None,
        attend: Attend | None = None,
    ) -> None:
        self.horizon_s = horizon_s
        self._attend = attend
        self._timeline_for = timeline_for
        self._log = logger
        self._pressure = pressure
        self._tracks: dict[str, _Track] = {}
        self._reasons: dict[str, str] = {}  # relpath -> the latest word told
        self._gone_at_s: dict[str, float] = {}
        self._said: set[str] = set()
        self._present: Collection[str] = frozenset()  # the watched set `_forget` last took
        self._changes: list[ForecastChange] = []  # of the pass under way

    def observe(
        self,
        samples: list[tuple[WatchedCgroup, TimelineSample]],
        now_s: float,
        present: Collection[str] | None = None,
    ) -> list[ForecastChange]:
        """The samples of a pass: forecast those growing; returns what changed, in order.
        `present`: the cgroups still there (a calm container is not sampled every pass);
        None: the sampled ones."""
        self._changes = []
        try:
            self._observe(samples, now_s, present)
        except Exception:
            log.exception("forecast_failed")
        return self._changes

    def _observe(
        self,
        samples: list[tuple[WatchedCgroup, TimelineSample]],
        now_s: float,
        present: Collection[str] | None,
    ) -> None:
        if self._pressure is not None:
            self._pressure.poll(time.monotonic())
        attend: list[str] = []
        for cg, sample in samples:
            try:
                if self._observe_one(cg, sample, now_s):
                    attend.append(cg.relpath)
            except Exception:  # one container's trouble spares the others
                log.exception("forecast_failed", extra={"cgroup": cg.relpath})
        if attend and self._attend is not None:
            self._attend(attend, ATTEND_S)
        self._forget(present if present is not None else {cg.relpath for cg, _ in samples}, now_s)

    def _observe_one(self, cg: WatchedCgroup, sample: TimelineSample, now_s: float) -> bool:
        """Whether the container grows or is warned of (to be sampled every second)."""
        track = self._tracks.get(cg.relpath)
        if track is None:
            track = self._tracks[cg.relpath] = _Track()
        value = unreclaimable_bytes(sample)
        track.note(sample.t_seconds, value)
        busy = track.episode.warning or track.episode.pending_since_s is not None
        if not busy and not track.growing(sample, value, self.horizon_s):
            if track.episode.reason != NOT_GROWING:  # quiet, nothing pending: nothing to step
                track.episode = Episode(reason=NOT_GROWING)
                self._say(cg.relpath, NOT_GROWING)
            return False
        track.grew_at_s = now_s
        judged = self._outlook(cg, now_s)
        if judged is not None and judged.warns(self.horizon_s) and self._inner_busy(cg.relpath):
            judged = Outlook(None, "a cgroup inside it nears its own limit first")
        track.episode, change = step(track.episode, judged, now_s, self.horizon_s)
        self._say(cg.relpath, track.episode.reason)
        self._publish(cg, track.episode, change, now_s)
        return True

    def _say(self, relpath: str, reason: str) -> None:
        if self._reasons.get(relpath) != reason:
            self._reasons[relpath] = reason
            self._changes.append(ReasonSaid(relpath, reason))

    def _inner_busy(self, relpath: str) -> bool:
        """A sampled cgroup inside this one (nested limits outside Kubernetes) is warned of or
        about to be: its kill comes first, and this one's usage falls with it."""
        prefix = relpath.rstrip("/") + "/"
        return any(
            rel.startswith(prefix) and (t.episode.warning or t.episode.pending_since_s is not None)
            for rel, t in self._tracks.items()
        )

    def _outlook(self, cg: WatchedCgroup, now_s: float) -> Outlook | None:
        timeline = self._timeline_for(cg.relpath, now_s)
        if timeline is None:
            return None
        pressure = None
        if self._pressure is not None:
            self._pressure.watch(cg.relpath, cg.fs_path, cg.version, time.monotonic())
            pressure = self._pressure.pressure(cg.relpath)
            self._say_what_pressure_lacks()
        return outlook(timeline.samples, pressure)

    def _say_what_pressure_lacks(self) -> None:
        """Once: the kernel's notifications the agent may not have (a non-root agent on a
        read-only cgroup mount); the forecast then reads PSI figures, or the samples alone."""
        assert self._pressure is not None
        for kind, failure in (
            ("pressure_level eventfds", self._pressure.failure),
            ("PSI triggers", self._pressure.trigger_failure),
        ):
            if failure is not None and kind not in self._said:
                self._said.add(kind)
                self._log.warning("pressure_notifications_unavailable", kind=kind, reason=failure)

    def _publish(
        self, cg: WatchedCgroup, episode: Episode, change: str | None, now_s: float
    ) -> None:
        identity = cg.identity
        if change == "started" and episode.first is not None:
            self._changes.append(
                WarningStarted(cg.relpath, identity.pod_uid, identity.container_id, episode.first)
            )
        elif change == "cleared":
            self._changes.append(
                WarningCleared(cg.relpath, identity.pod_uid, now_s, episode.reason)
            )
        if episode.warning or change == "cleared":
            seconds = episode.seconds_to_oom(now_s)
            self._changes.append(
                Countdown(cg.relpath, identity.pod_uid, identity.container_id, seconds)
            )

    def _forget(self, present: Collection[str], now_s: float) -> None:
        """End the warnings of containers gone; let go of calm ones' pressure."""
        # the same watched set as last time: every track is of a container in it
        left = [] if present is self._present else [r for r in self._tracks if r not in present]
        self._present = present
        for relpath in left:
            del self._tracks[relpath]
            self._gone_at_s[relpath] = now_s
            self._changes.append(ContainerGone(relpath, now_s))
        for relpath in [r for r, at in self._gone_at_s.items() if now_s - at > REASON_KEEP_S]:
            del self._gone_at_s[relpath]
            if relpath not in self._tracks and self._reasons.pop(relpath, None) is not None:
                self._changes.append(ReasonSaid(relpath, None))
        if self._pressure is None:
            return
        for relpath in self._pressure.watched():
            track = self._tracks.get(relpath)
            if track is None or now_s - track.grew_at_s > PRESSURE_RELEASE_S:
                self._pressure.forget(relpath)

    def close(self) -> None:
        if self._pressure is not None:
            self._pressure.close()
