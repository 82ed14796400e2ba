"""Kills per container and time bucket from Prometheus: one range query over oomwatch's kill
counter, the whole window, every node (the fleet view's counts when a URL is given).

The counter's series appear at their first kill, so `increase()` alone misses that kill: each
bucket is counted the way the shipped rules count (rules/oomwatch.rules.yaml), the whole value
of series that did not exist a bucket ago plus `increase()` for the others.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BY = ("namespace", "pod", "container", "scope", "node", "instance")
METRIC = "oomwatch_oom_incidents_total"


class PrometheusError(Exception):
    """The query could not be answered (names the URL and what it said)."""


@dataclass(frozen=True, slots=True)
class KillSeries:
    """Kills of one container (or of a node, pod labels empty) per bucket, oldest first."""

    labels: dict[str, str]
    buckets: tuple[int, ...]


def step_s(window_s: float) -> int:
    """Bucket width: an hour up to a day and a half, six hours up to three days, then days."""
    for limit_s, step in ((36 * 3600, 3600), (3 * 86400, 6 * 3600), (60 * 86400, 86400)):
        if window_s <= limit_s:
            return step
    return 7 * 86400


def kills_expr(step: int, job: str | None = None) -> str:
    """The range query; `job`: only the series of that scrape job (the agents')."""
    metric = METRIC + (f"{{job={json.dumps(job)}}}" if job else "")
    inner = f"({metric} unless {metric} offset {step}s) or increase({metric}[{step}s])"
    return f"sum by ({', '.join(BY)}) ({inner})"


def bucket_ends(since_s: float, until_s: float, step: int) -> list[float]:
    """The evaluation times: each bucket ends there and reaches one step back."""
    count = max(1, math.ceil((until_s - since_s) / step))
    return [until_s - step * (count - 1 - i) for i in range(count)]


def parse_matrix(reply: Mapping[str, Any], ends: list[float]) -> list[KillSeries]:
    """A query_range reply -> per-series kill counts at `ends` (missing points count 0)."""
    if reply.get("status") != "success":
        raise PrometheusError(f"{reply.get('errorType')}: {reply.get('error')}")
    out: list[KillSeries] = []
    for series in reply.get("data", {}).get("result", []):
        values = {round(float(t)): float(v) for t, v in series.get("values", [])}
        counts = tuple(max(0, round(values.get(round(end), 0.0))) for end in ends)
        if any(counts):
            metric = series.get("metric", {})
            out.append(KillSeries({k: str(metric.get(k, "")) for k in BY}, counts))
    return out


def kill_series(
    url: str,
    since_s: float,
    until_s: float,
    *,
    token: str | None = None,
    timeout_s: float = 30,
    job: str | None = None,
) -> tuple[list[KillSeries], list[float], int]:
    """Run the range query; (series, bucket end times, step seconds)."""
    step = step_s(until_s - since_s)
    ends = bucket_ends(since_s, until_s, step)
    params = {
        "query": kills_expr(step, job),
        "start": f"{ends[0]:.3f}",
        "end": f"{ends[-1]:.3f}",
        "step": f"{step}s",
    }
    request = urllib.request.Request(
        url.rstrip("/") + "/api/v1/query_range?" + urllib.parse.urlencode(params)
    )
    if token:
        # Unredirected: urllib would send it on to wherever a redirect points.
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            reply = json.load(resp)
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")[:300]
        raise PrometheusError(f"{url}: HTTP {exc.code}: {body}") from exc
    except (OSError, ValueError) as exc:
        raise PrometheusError(f"{url}: {exc}") from exc
    return parse_matrix(reply, ends), ends, step
