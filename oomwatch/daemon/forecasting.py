"""The agent's pre-OOM warnings: the forecaster (oomwatch.forecast) wired to the samples, the
kernel's pressure reports, the store and the sinks.

`ForecastWatch.observe` runs on the cgroup worker's thread after each sample.  A cheap look at
each container's last two minutes picks the few whose unreclaimable memory grows towards
their limit; only those get the full forecast over their sampled timeline, and their
pressure watched.  A warning (`oomwatch.forecast.episodes`) is stored, logged
(`memory_limit_approaching`), shown as `oomwatch_container_seconds_to_oom`, and with
Kubernetes sent as a `MemoryLimitApproaching` Event.  `ForecastJoin` (an enricher) tells each
kill whether it was predicted, and how early.  Nothing here raises into its caller.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from oomwatch.cgroups.discovery import WatchedCgroup
from oomwatch.cgroups.pressure import PressureWatch
from oomwatch.daemon.pipeline import container_cgroup
from oomwatch.forecast import DEFAULT_HORIZON_S, Forecast, Outlook, outlook, unreclaimable_bytes
from oomwatch.forecast.episodes import CLEAR_S, Episode, step
from oomwatch.forecast.model import MIN_RISE_SHARE
from oomwatch.forecast.text import describe, growing_text
from oomwatch.incident import (
    ForecastRecord,
    Incident,
    Timeline,
    TimelineSample,
    iso_epoch_s,
    iso_time,
)
from oomwatch.sinks.metrics import Metrics, SeriesLabels
from oomwatch.stages import EventLogger
from oomwatch.store import IncidentStore

log = logging.getLogger("oomwatch.forecast")

TREND_STEP_S = 10.0  # the cheap look keeps one point per 10 s ...
TREND_STEP_SLACK_S = 0.5  # (a container far from its limit is sampled about every 10 s)
TREND_KEEP_S = 130.0  # ... for this long
TREND_MIN_S = 50.0  # and needs this much of it
PRESSURE_RELEASE_S = 120.0  # a container's pressure is watched this long after it last grew
REASON_KEEP_S = 600.0  # a gone container's last word is kept this long for its kill
NOT_GROWING = "no sustained growth seen"
KILL_GRACE_S = CLEAR_S + 30.0  # a kill this soon after its warning cleared was predicted
ATTEND_S = 120.0  # a container growing or warned of is sampled every second this long

TimelineFor = Callable[[str, float], Timeline | None]
Attend = Callable[[list[str], float], None]
"""(cgroups, for how long) -> sample them every interval."""
LabelsFor = Callable[[str | None, str | None], SeriesLabels | None]
WarnPod = Callable[[str, str | None, str, dict[str, object]], None]
"""(pod UID, container ID, note, details) -> queue a `MemoryLimitApproaching` Event."""


@dataclass(slots=True)
class _Track:
    trend: deque[tuple[float, int]] = field(default_factory=deque)  # (t, unreclaimable)
    episode: Episode = field(default_factory=Episode)
    warning_id: int | None = None
    grew_at_s: float = 0.0
    labels: SeriesLabels | None = None  # of the gauge, while a warning shows on it

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
    """(Cgroup worker thread) forecasts for the sampled containers; warnings to the sinks."""

    def __init__(
        self,
        *,
        timeline_for: TimelineFor,
        store: IncidentStore,
        metrics: Metrics,
        logger: EventLogger,
        labels_for: LabelsFor,
        horizon_s: float = DEFAULT_HORIZON_S,
        pressure: PressureWatch | None = None,
        warn_pod: WarnPod | None = None,
        attend: Attend | None = None,
    ) -> None:
        self.horizon_s = horizon_s
        self._attend = attend
        self._timeline_for = timeline_for
        self._store = store
        self._metrics = metrics
        self._log = logger
        self._labels_for = labels_for
        self._pressure = pressure
        self._warn_pod = warn_pod
        self._tracks: dict[str, _Track] = {}
        self.reasons: dict[str, str] = {}  # relpath -> the latest word (read by the join)
        self._gone_at_s: dict[str, float] = {}
        self._said: set[str] = set()
        self._present: Collection[str] = frozenset()  # the watched set `_forget` last took

    def observe(
        self,
        samples: list[tuple[WatchedCgroup, TimelineSample]],
        now_s: float,
        present: Collection[str] | None = None,
    ) -> None:
        """The samples of a pass: forecast those growing, publish what changed.  `present`:
        the cgroups still there (a calm container is not sampled every pass); None: the
        sampled ones."""
        try:
            self._observe(samples, now_s, present)
        except Exception:
            log.exception("forecast_failed")

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
            except Exception:  # one container's trouble (a full store) spares the others
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
                self.reasons[cg.relpath] = NOT_GROWING
            return False
        track.grew_at_s = now_s
        judged = self._outlook(cg, now_s)
        if judged is not None and judged.warns(self.horizon_s) and self._inner_busy(cg.relpath):
            judged = Outlook(None, "a cgroup inside it nears its own limit first")
        track.episode, change = step(track.episode, judged, now_s, self.horizon_s)
        self.reasons[cg.relpath] = track.episode.reason
        self._publish(cg, track, change, now_s)
        return True

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
        for kind, failure in (("pressure_level eventfds", self._pressure.failure),
                              ("PSI triggers", self._pressure.trigger_failure)):  # fmt: skip
            if failure is not None and kind not in self._said:
                self._said.add(kind)
                self._log.warning("pressure_notifications_unavailable", kind=kind, reason=failure)

    def _publish(self, cg: WatchedCgroup, track: _Track, change: str | None, now_s: float) -> None:
        identity = cg.identity
        labels = self._labels_for(identity.pod_uid, identity.container_id)
        episode = track.episode
        if change == "started" and episode.first is not None:
            self._started(cg, track, episode.first, labels)
        elif change == "cleared" and track.warning_id is not None:
            self._store.end_warning(track.warning_id, now_s, "cleared")
            track.warning_id = None
            self._log.info("memory_limit_forecast_cleared", cgroup=cg.relpath,
                           pod_uid=identity.pod_uid, reason=episode.reason)  # fmt: skip
        if labels is not None and (episode.warning or change == "cleared"):
            self._metrics.set_seconds_to_oom(labels, episode.seconds_to_oom(now_s))
            track.labels = labels if episode.warning else None

    def _started(
        self, cg: WatchedCgroup, track: _Track, forecast: Forecast, labels: SeriesLabels | None
    ) -> None:
        identity = cg.identity
        where = _where(cg, labels)
        note = describe(forecast, where)
        details: dict[str, object] = {
            **dataclasses.asdict(forecast),
            "level": forecast.level,
            "growing_text": growing_text(forecast.growing),
            "text": note,
        }
        track.warning_id = self._store.add_warning(
            cg.relpath, identity.pod_uid, identity.container_id, forecast.at_s, details
        )
        self._log.warning(
            "memory_limit_approaching",
            cgroup=cg.relpath,
            namespace=labels.namespace if labels else None,
            pod=labels.pod if labels else None,
            container=labels.container if labels else None,
            pod_uid=identity.pod_uid,
            seconds_to_oom=round(forecast.seconds_to_oom, 1),
            confidence=forecast.confidence,
            limit_bytes=forecast.limit_bytes,
            unreclaimable_bytes=forecast.unreclaimable_bytes,
            slope_bytes_per_second=round(forecast.slope_bytes_per_second),
            message=note,
        )
        if self._warn_pod is not None and identity.pod_uid:
            self._warn_pod(identity.pod_uid, identity.container_id, note, details)

    def _forget(self, present: Collection[str], now_s: float) -> None:
        """End the warnings of containers gone; let go of calm ones' pressure."""
        # the same watched set as last time: every track is of a container in it
        left = [] if present is self._present else [r for r in self._tracks if r not in present]
        self._present = present
        for relpath in left:
            gone = self._tracks.pop(relpath)
            self._gone_at_s[relpath] = now_s
            if gone.warning_id is not None:
                self._store.end_warning(gone.warning_id, now_s, "cleared")
            if gone.labels is not None:
                self._metrics.set_seconds_to_oom(gone.labels, None)
        for relpath in [r for r, at in self._gone_at_s.items() if now_s - at > REASON_KEEP_S]:
            del self._gone_at_s[relpath]
            if relpath not in self._tracks:
                self.reasons.pop(relpath, None)
        if self._pressure is None:
            return
        for relpath in self._pressure.watched():
            track = self._tracks.get(relpath)
            if track is None or now_s - track.grew_at_s > PRESSURE_RELEASE_S:
                self._pressure.forget(relpath)

    def close(self) -> None:
        if self._pressure is not None:
            self._pressure.close()


def _where(cg: WatchedCgroup, labels: SeriesLabels | None) -> str:
    if labels is not None and labels.pod:
        container = f"container {labels.container} of " if labels.container else ""
        return f"{container}pod {labels.namespace}/{labels.pod}"
    return f"cgroup {cg.relpath}"


class ForecastJoin:
    """Enricher: whether a kill was predicted, and how early (from the store's warnings)."""

    def __init__(self, store: IncidentStore, reasons: dict[str, str]) -> None:
        self._store = store
        self._reasons = reasons

    def enrich(self, incident: Incident) -> bool:
        if incident.forecast is not None or incident.kind not in ("memcg", "unknown"):
            return True
        cgroup = incident.task_memcg or incident.group_cgroup
        killed_at_s = iso_epoch_s(incident.wall_time) or iso_epoch_s(incident.detected_at)
        if cgroup is None or killed_at_s is None:
            return True
        container = container_cgroup(cgroup)
        warning = self._store.warning_before(container, killed_at_s, KILL_GRACE_S)
        if warning is None:
            reason = self._reasons.get(container)
            if reason is not None:
                incident.forecast = ForecastRecord(False, reason=reason)
            return True
        self._store.end_warning(warning.id, killed_at_s, "killed")
        data = warning.data
        incident.forecast = ForecastRecord(
            predicted=True,
            warned_at=iso_time(warning.started_at_s),
            lead_time_seconds=round(killed_at_s - warning.started_at_s, 1),
            seconds_to_oom_at_warning=_number(data.get("seconds_to_oom")),
            confidence=_number(data.get("confidence")),
            confidence_level=str(data.get("level") or "") or None,
            growing=str(data.get("growing_text") or "") or None,
        )
        return True


def _number(value: object) -> float | None:
    return round(float(value), 3) if isinstance(value, int | float) else None
