"""The start-up warm-up: its reports take the whole kill path (so it warms what a kill runs),
it leaves nothing behind, it never stops start-up, and after it a real kill compiles no
pattern (each case that needs a fresh interpreter runs in a child)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from oomwatch.daemon import warm_up as warm_up_module
from oomwatch.daemon.warm_up import WARM_UP_REPORTS, warm_up, warm_up_kill
from oomwatch.sinks.log import get_logger, setup_logging

TESTS = Path(__file__).resolve().parents[1]
REAL_KILLS = (
    TESTS / "daemon" / "data" / "memcg_kill.kmsg",  # cgroup v1, this project's host kernel
    TESTS / "data" / "kernel-v2" / "6.12.117+deb12-amd64" / "kubelet-systemd-container-limit.kmsg",
)


@pytest.fixture
def log_stream() -> io.StringIO:
    stream = io.StringIO()
    setup_logging("json", stream)
    return stream


@pytest.mark.parametrize(
    ("report", "pod_uid", "container_id", "victim_pid"),
    [
        (0, "0a0e0000-0000-4000-8000-00000000a001", "c0" * 32, 4201),
        (1, "0a0e0000-0000-4000-8000-00000000a002", "c1" * 32, 4202),
    ],
)
def test_each_report_takes_the_whole_kill_path(
    log_stream: io.StringIO, report: int, pod_uid: str, container_id: str, victim_pid: int
) -> None:
    (kill,) = warm_up_kill(WARM_UP_REPORTS[report], get_logger())
    assert kill.kind == "memcg"
    assert kill.victim is not None and kill.victim.pid == victim_pid
    assert (kill.pod_uid, kill.container_id) == (pod_uid, container_id)
    assert kill.verdict_code == "limit-container"  # diagnosed
    assert kill.memcg is not None and kill.memcg.limit_bytes == kill.memcg.usage_bytes
    assert [t.pid for t in kill.tasks] == [victim_pid]  # the task table was decoded
    assert log_stream.getvalue() == ""  # rendered, never written


def test_warm_up_leaves_no_trace(log_stream: io.StringIO) -> None:
    warm_up(get_logger())
    assert log_stream.getvalue() == ""


def test_a_failing_warm_up_is_logged_and_start_up_goes_on(
    log_stream: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: object) -> None:
        raise RuntimeError("a decoder bug")

    monkeypatch.setattr(warm_up_module, "warm_up_kill", broken)
    warm_up(get_logger())  # does not raise
    (line,) = log_stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["event"] == "warm_up_failed"
    assert record["error"] == "RuntimeError: a decoder bug"


# In a fresh interpreter: the patterns compiled while a real kill goes the kill path, with and
# without the warm-up before it.  `re._compiler.compile` runs on a cache miss only.
CHILD = """
import io, json, re, sys
from oomwatch.daemon.agent import Agent  # the agent's imports, as `oomwatch run` has them
from oomwatch.daemon.warm_up import warm_up, warm_up_kill
from oomwatch.sinks.log import get_logger, setup_logging
setup_logging("json", io.StringIO())
if sys.argv[1] == "warm":
    warm_up(get_logger())
compiled = []
real_compile = re._compiler.compile
def counting(pattern, flags):
    compiled.append(str(pattern))
    return real_compile(pattern, flags)
re._compiler.compile = counting
victims = []
for path in sys.argv[2:]:
    lines = open(path, "rb").read().splitlines()
    kills = warm_up_kill([(n, line + b"\\n") for n, line in enumerate(lines)], get_logger())
    victims += [k.victim.pid for k in kills if k.victim is not None]
print(json.dumps({"compiled": compiled, "victims": victims}))
"""


def _first_kills(mode: str) -> dict[str, list[object]]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, *map(str, REAL_KILLS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, list[object]] = json.loads(done.stdout)
    return result


def test_after_the_warm_up_a_real_kill_compiles_no_pattern() -> None:
    cold, warm = _first_kills("cold"), _first_kills("warm")
    assert cold["victims"] == warm["victims"] == [9351, 231]  # both kills took the path
    assert cold["compiled"]  # without it the first kill compiles patterns ...
    assert warm["compiled"] == []  # ... with it, none
