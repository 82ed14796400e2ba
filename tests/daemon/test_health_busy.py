"""`/healthz` is served by its own thread from the loop's heartbeat: it answers within the
kubelet's default probe timeout (1 s) while the loop is busy in Python, and says 503 once
the loop has not turned for `HEARTBEAT_STALE_S` (stuck), 200 again when it turns.  Time the
loop's thread spent waiting for a CPU does not count: a starved loop is not a stuck one."""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support import wait_for
from support.agent import agent_thread
from support.host import config_for, fake_host

from oomwatch.daemon import agent as agent_module
from oomwatch.daemon.heartbeat import Heartbeat, run_delay_s

BUSY_S = 1.0
STALE_S = 2.0  # past BUSY_S: a busy turn is not a stuck loop


def healthz(port: int) -> tuple[int, float]:
    """The status of one GET /healthz and how long it took (-1: no answer in 5 s)."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            status = int(reply.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = -1
    return status, time.monotonic() - started


def test_healthz_answers_while_the_loop_is_busy_and_fails_once_it_is_stuck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_module, "HEARTBEAT_STALE_S", STALE_S)
    _container_dir, writer, _out = fake_host(tmp_path)
    busy, stuck, release = threading.Event(), threading.Event(), threading.Event()
    try:
        with agent_thread(config_for(tmp_path)) as agent:
            assert wait_for(lambda: agent.metrics_address is not None, 5.0)
            assert agent.metrics_address is not None
            port = int(agent.metrics_address[1])
            assert healthz(port)[0] == 200
            real = agent.pipeline.process

            def process(*args: Any, **kwargs: Any) -> None:
                if not busy.is_set():  # one turn spends BUSY_S in Python (a big decode)
                    busy.set()
                    until = time.monotonic() + BUSY_S
                    while time.monotonic() < until:
                        sum(range(1000))
                if stuck.is_set():  # a loop that never turns again (until released)
                    release.wait(30)
                real(*args, **kwargs)

            monkeypatch.setattr(agent.pipeline, "process", process)
            agent._wake()
            assert busy.wait(5)
            answers = [healthz(port) for _ in range(5)]
            assert [s for s, _ in answers] == [200] * 5, answers
            assert max(t for _, t in answers) < 1.0, answers
            stuck.set()
            agent._wake()
            assert wait_for(lambda: healthz(port)[0] == 503, STALE_S + 5.0)
            status, took_s = healthz(port)
            assert status == 503 and took_s < 1.0  # a stuck loop is told promptly too
            release.set()
            stuck.clear()
            assert wait_for(lambda: healthz(port)[0] == 200, 5.0)
    finally:
        release.set()
        os.close(writer)


class Clocks:
    """A wall clock and a run-queue wait the test moves (None: the wait cannot be read)."""

    def __init__(self) -> None:
        self.now_s, self.delay_s = 100.0, 5.0
        self.readable = True

    def clock(self) -> float:
        return self.now_s

    def run_delay(self, _tid: int) -> float | None:
        return self.delay_s if self.readable else None


def test_a_starved_loop_is_not_stale_a_blocked_or_spinning_one_is() -> None:
    clocks = Clocks()
    beat = Heartbeat(clocks.clock, clocks.run_delay)
    beat.beat()
    clocks.now_s += 40.0
    clocks.delay_s += 35.0  # 35 of the 40 s waiting for a CPU (the soak's nice-19 agent)
    assert beat.stale_s() == 5.0
    beat.beat()
    clocks.now_s += 40.0  # blocked 40 s, or spinning on its CPU: no run-queue wait
    assert beat.stale_s() == 40.0
    clocks.readable = False
    assert beat.stale_s() == 40.0  # no schedstat: wall time, as before


def test_the_run_queue_wait_is_read_for_a_real_thread() -> None:
    delay = run_delay_s(threading.get_native_id())
    assert delay is not None and delay >= 0.0
    assert run_delay_s(2**31 - 1) is None  # no such thread
