"""One rule for times without a zone: a `dmesg -T` kill (its stamp names no zone)
is the same instant in the store, the trend analysis, the metrics and the report's filters,
whatever zone the machine reading it runs in."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oomwatch.decode import decode_text
from oomwatch.diagnosis.trends import incident_time_s
from oomwatch.incident import kill_epoch_s
from oomwatch.report.filters import parse_since
from oomwatch.store import IncidentStore

DMESG_T = (
    Path(__file__).resolve().parent.parent
    / "data"
    / "corpus"
    / ("11-k8s-issue45911-dmesg-T-grep-filtered-coreos-4.9-global.log")
)


@pytest.fixture(params=["UTC", "America/New_York", "Asia/Kolkata"])
def machine_zone(request: pytest.FixtureRequest) -> Iterator[str]:
    """The reading machine's local zone (TZ), restored after the test."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    yield request.param
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_a_zone_less_kill_is_one_instant_everywhere(machine_zone: str, tmp_path: Path) -> None:
    incident = decode_text(DMESG_T.read_bytes()).incidents[0]
    assert incident.wall_time is not None and "+" not in incident.wall_time  # no zone given
    taken_as_utc = parse_since(incident.wall_time).timestamp()
    assert incident_time_s(incident) == taken_as_utc
    assert kill_epoch_s(incident) == taken_as_utc
    store = IncidentStore(tmp_path, max_age_s=1e12)
    store.add(incident)
    [(killed_at_s,)] = store._db.execute("SELECT killed_at_s FROM incidents").fetchall()
    store.close()
    assert killed_at_s == taken_as_utc
