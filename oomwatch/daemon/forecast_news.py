"""What the forecast on the cgroup worker tells the pipeline: frozen changes, in order.

The worker judges (`forecasting.ForecastWatch`, over its samples and pressure watches); the
loop records (`forecast_stage.ForecastBook`: the store's rows, the log lines, the gauge, the
Event) and joins kills to what it recorded.  What crosses between them is only these values,
taken with the `CgroupView` (`CgroupView.forecast`).
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.forecast import Forecast


@dataclass(frozen=True, slots=True)
class WarningStarted:
    """A container's forecast held long enough: warn (`forecast.at_s` is when)."""

    cgroup: str
    pod_uid: str | None
    container_id: str | None
    forecast: Forecast


@dataclass(frozen=True, slots=True)
class WarningCleared:
    """The forecast went away for long enough: the warning ends at `at_s`."""

    cgroup: str
    pod_uid: str | None
    at_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class Countdown:
    """The time left, counted down, while a warning is in force (None: it just cleared)."""

    cgroup: str
    pod_uid: str | None
    container_id: str | None
    seconds_to_oom: float | None


@dataclass(frozen=True, slots=True)
class ContainerGone:
    """A tracked container left the watched set at `at_s`: its warning ends, its gauge goes."""

    cgroup: str
    at_s: float


@dataclass(frozen=True, slots=True)
class ReasonSaid:
    """The latest word on a container, told to a kill that was not warned of (None: it was
    gone long enough to be forgotten)."""

    cgroup: str
    reason: str | None


ForecastChange = WarningStarted | WarningCleared | Countdown | ContainerGone | ReasonSaid


@dataclass(frozen=True, slots=True)
class ForecastNews:
    """The changes since the previous take, numbered by take (`serial`, 0: none) so a view
    passed twice is recorded once."""

    serial: int = 0
    changes: tuple[ForecastChange, ...] = ()
