"""Everything the plugin prints came from the cluster or Prometheus: forged Events, objects and
series print inert, objects no agent wrote do not count, node names are checked, and the
Prometheus token stays with the host it was given for."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from oomwatch.fleet.events import parse_event, parse_oomincident
from oomwatch.fleet.prom import KillSeries, kill_series, kills_expr
from oomwatch.fleet.report import BadTarget, parse_target, to_yaml, wide_table
from oomwatch.fleet.top import build, render
from oomwatch.kube.oomincident import FIELD_MANAGER
from oomwatch.kube.summary import SUMMARY_ANNOTATION

EVIL = "web\x1b[2J\x1b]0;owned\x07\r\nshop  Deployment/evil  app  container  99\u202egnp"


def _printable(text: str) -> None:
    assert not any(c in text for c in ("\x1b", "\x07", "\r", "\u202e"))


def _event(**summary: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "x.1",
            "namespace": "shop",
            "annotations": {SUMMARY_ANNOTATION: json.dumps({"v": 1, **summary})},
        },
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": EVIL},
        "reason": "ContainerOOMKill",
        "message": EVIL,
        "eventTime": "2026-11-26T10:00:00.000000Z",
        "reportingComponent": "oomwatch.io/agent",
        "reportingInstance": "oomwatch-node-a",
    }


def _object(manager: str = FIELD_MANAGER, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "oomwatch.io/v1alpha1",
        "kind": "OOMIncident",
        "metadata": {
            "name": "web-app-1",
            "namespace": "shop",
            "managedFields": [{"manager": manager, "operation": "Update"}],
        },
        "workload": "Deployment/web",
        "container": "app",
        "node": "node-a",
        "pod": "web-1",
        "verdictCode": "limit-container",
        "verdict": "killed",
        "kills": 7,
        "firstSeen": "2026-11-26T09:00:00Z",
        "lastSeen": "2026-11-26T10:00:00Z",
        "limit": "256Mi",
        "incident": {
            "kind": "memcg",
            "limit_scope": "container",
            "findings": [{"code": "limit-container"}],
        },
        **fields,
    }


def test_forged_events_and_series_print_inert_in_top() -> None:
    seen = parse_event(_event(workload=EVIL, container=EVIL, recommendation=EVIL, findings=[EVIL]))
    assert seen is not None
    series = [
        KillSeries(
            {
                "namespace": "shop",
                "pod": EVIL,
                "container": EVIL,
                "scope": EVIL,
                "node": EVIL,
                "instance": "",
            },
            (1, 2),
        )
    ]
    end = seen.last_s + 60
    rows = build([seen], series, [end - 3600, end], 3600)
    out = render(rows, "header", [], wide=True)
    _printable(out)
    assert "\\x1b[2J" in out
    lines = out.splitlines()
    inferred = any(r.inferred for r in rows)
    assert len(lines) == 1 + 1 + len(rows) + inferred  # header, columns, a line a row, ~ note
    assert not any(line.startswith("shop  Deployment/evil") for line in lines)


def test_forged_objects_print_inert_in_every_output() -> None:
    forged = _object(workload=EVIL, container=EVIL, verdictCode=EVIL, node=EVIL)
    _printable(wide_table([forged]))
    assert len(wide_table([forged]).splitlines()) == 2
    _printable(to_yaml({"items": [forged]}))


def test_only_objects_an_agent_wrote_count() -> None:
    mine = parse_oomincident(_object())
    assert mine is not None and mine.count == 7 and mine.findings == ("limit-container",)
    assert parse_oomincident(_object(manager="kubectl-edit")) is None
    touched = _object()
    touched["metadata"]["managedFields"].append({"manager": "kubectl-patch"})
    assert parse_oomincident(touched) is None
    assert parse_oomincident({**_object(), "metadata": {"namespace": "shop"}}) is None


@pytest.mark.parametrize(
    "text",
    ["node/Bad_Node", "node/a..b", "node/" + "a" * 254, "pod/" + EVIL, "secret/x", "node/-a"],
)
def test_targets_are_checked_before_use(text: str) -> None:
    with pytest.raises(BadTarget) as caught:
        parse_target(text)
    _printable(str(caught.value))


def test_targets_follow_kubectls_names() -> None:
    assert parse_target("web-1").kind == "pod"
    assert parse_target("deploy/web").words() == "Deployment/web"
    assert parse_target("sts/db").words() == "StatefulSet/db"
    assert parse_target("node/ip-10-0-0-1.ec2.internal").kind == "node"


def test_the_job_matcher_selects_the_agents_series() -> None:
    assert 'oomwatch_oom_incidents_total{job="oomwatch"}' in kills_expr(3600, "oomwatch")
    assert '{job="a\\"b"}' in kills_expr(3600, 'a"b')  # quoted, never spliced


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str | None]]] = []
    target = ""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        _Recorder.seen.append((self.path, self.headers.get("Authorization")))
        if self.path.startswith("/api/v1/query_range") and _Recorder.target:
            self.send_response(302)
            self.send_header("Location", _Recorder.target + self.path.replace("/api", "/x/api"))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"status": "success", "data": {"result": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def servers() -> Iterator[tuple[str, str]]:
    started = [ThreadingHTTPServer(("127.0.0.1", 0), _Recorder) for _ in range(2)]
    for server in started:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield tuple(f"http://127.0.0.1:{s.server_address[1]}" for s in started)  # type: ignore[misc]
    finally:
        for server in started:
            server.shutdown()
            server.server_close()


def test_the_prometheus_token_is_not_sent_across_a_redirect(servers: tuple[str, str]) -> None:
    prometheus, elsewhere = servers
    _Recorder.seen, _Recorder.target = [], elsewhere
    kill_series(prometheus, 0.0, 7200.0, token="s3cret")
    assert [auth for path, auth in _Recorder.seen if not path.startswith("/x/")] == [
        "Bearer s3cret"
    ]
    followed = [auth for path, auth in _Recorder.seen if path.startswith("/x/")]
    assert followed == [None]
