"""The forecast's stage of the pipeline, on the loop's thread: record what the worker's
forecast changed, and tell each kill whether it was warned of.

`ForecastBook.take` records the changes (`forecast_news`) the worker published with its
view: a warning is stored, logged (`memory_limit_approaching`), shown as
`oomwatch_container_seconds_to_oom`, and with Kubernetes sent as a `MemoryLimitApproaching`
Event; its end is stored and logged.  The book keeps the warnings in force and those ended
lately, and the latest word on each container, so `ForecastJoin` (an enricher) joins a kill
from them: whether it was predicted, and how early.  At start the book resumes the store's
warnings still open or ended lately (an earlier run's).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable

from oomwatch.cgroup_identity import container_cgroup
from oomwatch.daemon.forecast_news import (
    ContainerGone,
    Countdown,
    ForecastChange,
    ForecastNews,
    ReasonSaid,
    WarningCleared,
    WarningStarted,
)
from oomwatch.forecast.episodes import CLEAR_S
from oomwatch.forecast.text import describe, growing_text
from oomwatch.incident import ForecastRecord, Incident, iso_epoch_s, iso_time
from oomwatch.sinks.metrics import Metrics, SeriesLabels
from oomwatch.stages import EventLogger
from oomwatch.store import IncidentStore
from oomwatch.store.forecasts import StoredWarning

log = logging.getLogger("oomwatch.forecast")

KILL_GRACE_S = CLEAR_S + 30.0  # a kill this soon after its warning cleared was predicted
ENDED_KEEP_S = 600.0  # an ended warning is kept this long for a kill read late

LabelsFor = Callable[[str | None, str | None], SeriesLabels | None]
WarnPod = Callable[[str, str | None, str, dict[str, object]], None]
"""(pod UID, container ID, note, details) -> queue a `MemoryLimitApproaching` Event."""


class ForecastBook:
    """(Loop thread) the forecast's warnings: recorded from the worker's changes, kept for
    the join."""

    def __init__(
        self,
        *,
        store: IncidentStore,
        metrics: Metrics,
        logger: EventLogger,
        labels_for: LabelsFor,
        warn_pod: WarnPod | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._log = logger
        self._labels_for = labels_for
        self._warn_pod = warn_pod
        self._wall = wall_clock
        self._serial = 0  # of the last news taken
        self._warnings: dict[str, list[StoredWarning]] = {}  # cgroup -> in force or ended lately
        self._in_force: dict[str, int] = {}  # cgroup -> the id of its warning in force
        self._ended: deque[tuple[float, str, int]] = deque()  # (ended at, cgroup, id), in order
        self._shown: dict[str, SeriesLabels] = {}  # cgroup -> the gauge's labels, while warned
        self.reasons: dict[str, str] = {}  # cgroup -> the latest word
        self._resume()

    def take(self, news: ForecastNews) -> None:
        """Record the changes of a take not recorded yet."""
        if news.serial <= self._serial:
            return
        self._serial = news.serial
        self.record(news.changes)

    def record(self, changes: Iterable[ForecastChange]) -> None:
        for change in changes:
            try:
                self._record(change)
            except Exception:  # one container's trouble (a full store) spares the others
                log.exception("forecast_failed", extra={"cgroup": change.cgroup})
        self._let_go(self._wall())

    def _record(self, change: ForecastChange) -> None:
        if isinstance(change, WarningStarted):
            self._started(change)
        elif isinstance(change, WarningCleared):
            warning_id = self._in_force.pop(change.cgroup, None)
            if warning_id is not None:
                self._end(change.cgroup, warning_id, change.at_s, "cleared")
                self._log.info(
                    "memory_limit_forecast_cleared",
                    cgroup=change.cgroup,
                    pod_uid=change.pod_uid,
                    reason=change.reason,
                )
        elif isinstance(change, Countdown):
            labels = self._labels_for(change.pod_uid, change.container_id)
            if labels is not None:
                self._metrics.set_seconds_to_oom(labels, change.seconds_to_oom)
                if change.seconds_to_oom is not None:
                    self._shown[change.cgroup] = labels
                else:
                    self._shown.pop(change.cgroup, None)
        elif isinstance(change, ContainerGone):
            warning_id = self._in_force.pop(change.cgroup, None)
            if warning_id is not None:
                self._end(change.cgroup, warning_id, change.at_s, "cleared")
            shown = self._shown.pop(change.cgroup, None)
            if shown is not None:
                self._metrics.set_seconds_to_oom(shown, None)
        elif isinstance(change, ReasonSaid):
            if change.reason is None:
                self.reasons.pop(change.cgroup, None)
            else:
                self.reasons[change.cgroup] = change.reason

    def _started(self, change: WarningStarted) -> None:
        forecast = change.forecast
        labels = self._labels_for(change.pod_uid, change.container_id)
        note = describe(forecast, _where(change.cgroup, labels))
        details: dict[str, object] = {
            **dataclasses.asdict(forecast),
            "level": forecast.level,
            "growing_text": growing_text(forecast.growing),
            "text": note,
        }
        warning_id = self._store.add_warning(
            change.cgroup, change.pod_uid, change.container_id, forecast.at_s, details
        )
        self._in_force[change.cgroup] = warning_id
        warning = StoredWarning(warning_id, forecast.at_s, None, None, details, change.cgroup)
        self._warnings.setdefault(change.cgroup, []).append(warning)
        self._log.warning(
            "memory_limit_approaching",
            cgroup=change.cgroup,
            namespace=labels.namespace if labels else None,
            pod=labels.pod if labels else None,
            container=labels.container if labels else None,
            pod_uid=change.pod_uid,
            seconds_to_oom=round(forecast.seconds_to_oom, 1),
            confidence=forecast.confidence,
            limit_bytes=forecast.limit_bytes,
            unreclaimable_bytes=forecast.unreclaimable_bytes,
            slope_bytes_per_second=round(forecast.slope_bytes_per_second),
            message=note,
        )
        if self._warn_pod is not None and change.pod_uid:
            self._warn_pod(change.pod_uid, change.container_id, note, details)

    def warning_before(self, cgroup: str, at_s: float) -> StoredWarning | None:
        """The latest warning of a cgroup that started by `at_s` and was still in force, or
        ended at most `KILL_GRACE_S` before it (a kill may come while the forecast wavers)."""
        fitting = [
            w
            for w in self._warnings.get(cgroup, ())
            if w.started_at_s <= at_s
            and (w.ended_at_s is None or w.ended_at_s >= at_s - KILL_GRACE_S)
        ]
        return max(fitting, key=lambda w: w.started_at_s, default=None)

    def killed(self, warning: StoredWarning, at_s: float) -> None:
        """The kill came: the warning's outcome (the first word stays)."""
        self._end(warning.cgroup, warning.id, at_s, "killed")

    def _end(self, cgroup: str, warning_id: int, at_s: float, outcome: str) -> None:
        self._store.end_warning(warning_id, at_s, outcome)
        kept = self._warnings.get(cgroup, [])
        for i, warning in enumerate(kept):
            if warning.id == warning_id and warning.outcome is None:
                kept[i] = dataclasses.replace(warning, ended_at_s=at_s, outcome=outcome)
                self._ended.append((at_s, cgroup, warning_id))

    def _let_go(self, now_s: float) -> None:
        """Forget warnings ended more than `ENDED_KEEP_S` ago."""
        while self._ended and self._ended[0][0] < now_s - ENDED_KEEP_S:
            _, cgroup, warning_id = self._ended.popleft()
            kept = [w for w in self._warnings.get(cgroup, ()) if w.id != warning_id]
            if kept:
                self._warnings[cgroup] = kept
            else:
                self._warnings.pop(cgroup, None)

    def _resume(self) -> None:
        """The store's warnings still open, or ended lately, as an earlier run left them."""
        now_s = self._wall()
        try:
            stored = self._store.warnings()
        except Exception:
            log.exception("forecast_warnings_unreadable")
            return
        for warning in stored:
            ended = warning.ended_at_s
            if ended is not None and ended < now_s - ENDED_KEEP_S:
                continue
            self._warnings.setdefault(warning.cgroup, []).append(warning)
            if ended is not None:
                self._ended.append((ended, warning.cgroup, warning.id))
        self._ended = deque(sorted(self._ended))


def _where(cgroup: str, labels: SeriesLabels | None) -> str:
    if labels is not None and labels.pod:
        container = f"container {labels.container} of " if labels.container else ""
        return f"{container}pod {labels.namespace}/{labels.pod}"
    return f"cgroup {cgroup}"


class ForecastJoin:
    """Enricher: whether a kill was predicted, and how early (from the book's warnings)."""

    def __init__(self, book: ForecastBook) -> None:
        self._book = book

    def enrich(self, incident: Incident) -> bool:
        if incident.forecast is not None or incident.kind not in ("memcg", "unknown"):
            return True
        cgroup = incident.task_memcg or incident.group_cgroup
        killed_at_s = iso_epoch_s(incident.wall_time) or iso_epoch_s(incident.detected_at)
        if cgroup is None or killed_at_s is None:
            return True
        container = container_cgroup(cgroup)
        warning = self._book.warning_before(container, killed_at_s)
        if warning is None:
            reason = self._book.reasons.get(container)
            if reason is not None:
                incident.forecast = ForecastRecord(False, reason=reason)
            return True
        self._book.killed(warning, killed_at_s)
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
