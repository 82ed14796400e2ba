"""`/healthz` is served by its own thread from the loop's heartbeat: it answers while the
loop is busy in Python (within the kubelet's 1 s probe timeout: `bench/soak_hostile.py`
times it on a loaded node), and says 503 once
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

STALE_S = 2.0


def healthz(port: int) -> int:
    """The status of one GET /healthz (-1: no answer in 5 s)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return -1


def test_healthz_answers_while_the_loop_is_busy_and_fails_once_it_is_stuck(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers come while the loop's turn is still running (in Python, holding the GIL but
    for its switch interval) or while it is stuck: the server never waits for the loop."""
    monkeypatch.setattr(agent_module, "HEARTBEAT_STALE_S", STALE_S)
    _container_dir, writer, _out = fake_host(tmp_path)
    busy, answered, stuck, release = (threading.Event() for _ in range(4))
    spun_out = False
    try:
        with agent_thread(config_for(tmp_path)) as agent:
            assert wait_for(lambda: agent.metrics_address is not None, 5.0)
            assert agent.metrics_address is not None
            port = int(agent.metrics_address[1])
            assert healthz(port) == 200
            real = agent.pipeline.process

            def process(*args: Any, **kwargs: Any) -> None:
                nonlocal spun_out
                if not busy.is_set():  # one turn busy in Python until the answers are in
                    busy.set()
                    until = time.monotonic() + 30.0  # a bound, should the answers never come
                    while not answered.is_set() and time.monotonic() < until:
                        sum(range(1000))
                    spun_out = not answered.is_set()
                if stuck.is_set():  # a loop that never turns again (until released)
                    release.wait(30)
                real(*args, **kwargs)

            monkeypatch.setattr(agent.pipeline, "process", process)
            agent._inbox.wake()
            assert busy.wait(5)
            answers = [healthz(port) for _ in range(5)]
            answered.set()
            assert answers == [200] * 5, answers
            assert not spun_out  # all five answered while the turn was still busy
            stuck.set()
            agent._inbox.wake()
            assert wait_for(lambda: healthz(port) == 503, STALE_S + 5.0)
            assert not release.is_set()  # told while the loop is still stuck
            release.set()
            stuck.clear()
            assert wait_for(lambda: healthz(port) == 200, 5.0)
    finally:
        answered.set()
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
