"""`--since`, `--pod` and `--last` for inputs other than the store (which filters in SQL)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

from oomwatch.diagnosis.trends import incident_time_s
from oomwatch.incident import Incident

_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """`2h`, `30m`, `90s`, `1d`, `1w` ago, or an ISO-8601 time (UTC when no zone is given)."""
    now = now or datetime.now(UTC)
    m = _RELATIVE.fullmatch(text.strip())
    if m:
        return now - timedelta(seconds=float(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()])
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since {text!r}: expected a relative time like 2h, 30m, 1d or an ISO-8601 time"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def pod_matches(incident: Incident, pod: str) -> bool:
    """A pod name, `namespace/name`, or the pod UID (the only one a bare kernel log carries)."""
    if incident.pod_uid and incident.pod_uid == pod:
        return True
    ctx = incident.k8s
    if ctx is None or not ctx.pod:
        return False
    namespace, _, name = pod.rpartition("/")
    return ctx.pod == name and (not namespace or ctx.namespace == namespace)


def selected(
    incidents: Iterable[Incident],
    since: datetime | None,
    pod: str | None,
    warn: Callable[[str], object],
) -> Iterator[Incident]:
    """The incidents that pass `--since` and `--pod`, one at a time, in input order; once
    all are read, `warn` is told how many could not be judged (an incident with no
    wall-clock time cannot pass `--since`)."""
    cutoff = since.timestamp() if since is not None else None
    undated = 0
    for incident in incidents:
        if cutoff is not None:
            if incident.wall_time is None:
                undated += 1
                continue
            if (incident_time_s(incident) or 0) < cutoff:
                continue
        if pod is None or pod_matches(incident, pod):
            yield incident
    if undated:
        warn(
            f"--since: {undated} incidents have no wall-clock time in this log"
            " (only seconds since boot) and were left out"
        )


def apply(
    incidents: Sequence[Incident], since: datetime | None, pod: str | None, last: int | None
) -> tuple[list[Incident], list[str]]:
    """`selected` and `--last` over a list: the incidents and the warnings."""
    warnings: list[str] = []
    out = list(selected(incidents, since, pod, warnings.append))
    if last is not None:
        out = out[-last:] if last > 0 else []
    return out, warnings
