"""`--since`, `--pod` and `--last` for inputs other than the store (which filters in SQL)."""

from __future__ import annotations

import re
from collections.abc import Sequence
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
    """A pod name, `namespace/name`, or the pod UID (the only one a bare kernel log carries);
    an ambiguous kill matches each pod it may have been in (it says it is ambiguous)."""
    namespace, _, name = pod.rpartition("/")
    ctx = incident.k8s
    known = [(incident.pod_uid, ctx.namespace if ctx else None, ctx.pod if ctx else None)]
    if incident.attribution is not None and incident.attribution.ambiguous:
        known += [(c.pod_uid, c.namespace, c.pod) for c in incident.attribution.candidates]
    return any(
        (uid and uid == pod) or (pod_name == name and (not namespace or ns == namespace))
        for uid, ns, pod_name in known
    )


def apply(
    incidents: Sequence[Incident], since: datetime | None, pod: str | None, last: int | None
) -> tuple[list[Incident], list[str]]:
    """The incidents that pass every filter, in input order, and warnings about what could not
    be judged (an incident with no wall-clock time cannot pass `--since`)."""
    out = list(incidents)
    warnings: list[str] = []
    if since is not None:
        cutoff = since.timestamp()
        undated = [i for i in out if i.wall_time is None]
        out = [i for i in out if i.wall_time is not None and (incident_time_s(i) or 0) >= cutoff]
        if undated:
            warnings.append(
                f"--since: {len(undated)} incidents have no wall-clock time in this log"
                " (only seconds since boot) and were left out"
            )
    if pod is not None:
        out = [i for i in out if pod_matches(i, pod)]
    if last is not None:
        out = out[-last:] if last > 0 else []
    return out, warnings
