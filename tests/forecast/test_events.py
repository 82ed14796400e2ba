"""The MemoryLimitApproaching Event obeys what a kill's Event obeys: only on a pod the API's
cache knows, its container found by ID, the note escaped and at most 1024 bytes, valid for
the API server; its summary says what the fleet view needs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from support.fakeapi import make_pod, running_status, validate_new_event

from oomwatch.kube.cache import PodCache
from oomwatch.kube.forecast_event import WarningEvents, build_warning_event
from oomwatch.kube.pods import decode_pod
from oomwatch.kube.publisher import EventUpdate, NotReady
from oomwatch.kube.summary import SUMMARY_ANNOTATION, parse_summary

CID = "d" * 64
NOW = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)
DETAILS = {
    "seconds_to_oom": 212.4,
    "confidence": 0.66,
    "limit_bytes": 256 << 20,
    "unreclaimable_bytes": 150 << 20,
    "slope_bytes_per_second": 500_000.0,
    "at_s": 1795470145.4,
}


def _pod() -> Any:
    statuses = [running_status(CID)]
    return decode_pod(make_pod(statuses=statuses))


def test_the_warning_event_is_valid_escaped_and_bounded() -> None:
    pod = _pod()
    note = "container app \x1b[31mwill\n reach " + "ü" * 900  # 1,800+ bytes, escapes
    draft = build_warning_event(pod, CID, note, DETAILS, "node-a", NOW)
    assert draft is not None
    body = draft.body
    assert validate_new_event(body, pod.namespace, creating=True) is None
    assert body["reason"] == "MemoryLimitApproaching" and body["type"] == "Warning"
    assert body["regarding"]["uid"] == pod.uid
    assert body["regarding"]["fieldPath"] == "spec.containers{app}"
    assert len(body["note"].encode()) <= 1024 and body["note"].endswith("...")
    assert "\x1b" not in body["note"] and "\n" not in body["note"]
    summary = parse_summary(body["metadata"]["annotations"][SUMMARY_ANNOTATION])
    assert summary is not None
    assert summary["workload"] == "Deployment/web" and summary["container"] == "app"
    assert summary["kind"] == "forecast" and summary["seconds_to_oom"] == 212.4


def test_no_event_for_a_pod_the_api_does_not_know() -> None:
    assert build_warning_event(None, CID, "x", DETAILS, "node-a", NOW) is None


class _Publisher:
    def __init__(self) -> None:
        self.builds: list[Any] = []

    def submit(self, build: Any, label: str) -> None:
        self.builds.append(build)


def test_warnings_wait_for_the_pod_cache_and_skip_unknown_pods() -> None:
    cache, publisher = PodCache(), _Publisher()
    live = {"value": False}
    events = WarningEvents("node-a", cache, publisher, lambda: live["value"])  # type: ignore[arg-type]
    pod = _pod()
    events.warn(pod.uid, CID, "note", DETAILS)
    [build] = publisher.builds
    try:
        build()
        raise AssertionError("a warning must wait while the cache lags the API")
    except NotReady:
        pass
    live["value"] = True
    assert build() == []  # the API does not know that pod: no Event
    cache.upsert(pod)
    [update] = build()
    assert isinstance(update, EventUpdate) and update.draft.container == "app"
