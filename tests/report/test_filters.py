"""--since parsing and --pod matching (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from oomwatch.incident import Incident, PodContext
from oomwatch.report.filters import apply, parse_since, pod_matches

NOW = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "ago"),
    [("2h", 7200), ("30m", 1800), ("90s", 90), ("1d", 86400), ("1w", 604800), ("1.5h", 5400)],
)
def test_relative_since(text: str, ago: int) -> None:
    assert parse_since(text, NOW) == NOW - timedelta(seconds=ago)


def test_iso_since_defaults_to_utc_and_keeps_zones() -> None:
    assert parse_since("2026-11-22T07:00:00", NOW) == datetime(2026, 11, 22, 7, tzinfo=UTC)
    assert parse_since("2026-11-22T09:00:00+02:00", NOW).timestamp() == NOW.timestamp() - 3600
    with pytest.raises(ValueError, match="--since 'soon'"):
        parse_since("soon", NOW)


def test_pod_matching() -> None:
    inc = Incident(pod_uid="u-1", k8s=PodContext(namespace="ml", pod="trainer-0"))
    assert pod_matches(inc, "u-1") and pod_matches(inc, "trainer-0")
    assert pod_matches(inc, "ml/trainer-0") and not pod_matches(inc, "other/trainer-0")
    assert not pod_matches(Incident(), "trainer-0")


def test_apply_orders_and_limits() -> None:
    incs = [Incident(wall_time=f"2026-11-22T0{h}:00:00+00:00", pod_uid=str(h)) for h in (5, 6, 7)]
    kept, warnings = apply(incs, NOW - timedelta(hours=2), None, None)
    assert [i.pod_uid for i in kept] == ["6", "7"] and warnings == []
    assert [i.pod_uid for i in apply(incs, None, None, 2)[0]] == ["6", "7"]
    assert apply(incs, None, None, 0)[0] == []
