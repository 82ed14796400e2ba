"""The one way tests start the node agent: `AgentProcess` (`oomwatch run` as a subprocess,
its JSON log lines collected with their arrival times) or `agent_thread` (the `Agent` of a
`DaemonConfig` on a thread of the test process, for tests that reach into its parts)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from oomwatch.daemon.agent import Agent
from oomwatch.daemon.config import DaemonConfig
from oomwatch.demo import start_at_log_end
from support import free_port, until
from support.fakeapi import FakeApiServer, kubeconfig

REPO = Path(__file__).resolve().parents[2]
LogLine = dict[str, Any]
LinePredicate = Callable[[LogLine], bool]


class AgentProcess:
    """`oomwatch run --log-format json` with `args`, its metrics on a free loopback port.

    Standalone unless `kubeconfig` names a cluster (the fake API server).  The code comes
    from `repo` (PYTHONPATH), so a benchmark can run an older checkout the same way.  Ready
    when constructed: its `started` line logged (`ready="started"`), `/healthz` answering
    200 (`"healthy"`), or at once (`None`).  Stopped by `stop()` or leaving a `with` block.
    `launcher` replaces the interpreter (say, `setpriv ... python3`: another uid; it must exec,
    so the pid stays the agent's).
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        state_dir: Path,
        kubeconfig: Path | None = None,
        repo: Path = REPO,
        ready: str | None = "started",
        ready_timeout_s: float = 60.0,
        launcher: Sequence[str] = (),
    ) -> None:
        self.state_dir = state_dir
        self.port = free_port()
        argv = [
            *(launcher or [sys.executable]),
            "-m",
            "oomwatch.cli",
            "run",
            *(["--standalone"] if kubeconfig is None else []),
            "--state-dir",
            str(state_dir),
            "--metrics-address",
            f"127.0.0.1:{self.port}",
            "--log-format",
            "json",
            *args,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OOMWATCH_", "KUBE"))}
        env.update(PYTHONPATH=str(repo), PYTHONUNBUFFERED="1")
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        state_dir.parent.mkdir(parents=True, exist_ok=True)
        # stderr to a file: a pipe nobody reads would block an agent that writes much there.
        self.stderr_path = state_dir.parent / f"agent-{self.port}.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=repo
            )
        self.lines: list[tuple[float, LogLine]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            if ready == "started":
                self.wait_line(lambda e: e.get("event") == "started", ready_timeout_s)
            elif ready == "healthy":
                self.wait_healthy(ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                entry = json.loads(raw)
            except ValueError:
                entry = {"event": "unparsable", "raw": raw.decode(errors="replace")}
            with self._lock:
                self.lines.append((time.monotonic(), entry))

    def events(self, pred: LinePredicate) -> list[tuple[float, LogLine]]:
        """The log lines so far that `pred` accepts, with their arrival times (monotonic)."""
        with self._lock:
            return [(t, e) for t, e in self.lines if pred(e)]

    def wait_line(self, pred: LinePredicate, timeout_s: float = 5.0) -> tuple[float, LogLine]:
        """The first line `pred` accepts, once it came; AssertionError if the agent exits
        or the time is up first (saying why)."""

        def came() -> tuple[float, LogLine] | None:
            if found := self.events(pred):
                return found[0]
            if self.proc.poll() is not None:
                self._reader.join(2)  # the last lines it wrote
                if found := self.events(pred):
                    return found[0]
                raise AssertionError(f"oomwatch run exited {self.proc.returncode}: {self.why()}")
            return None

        return until("a matching log line", came, timeout_s, interval_s=0.01, why=self.why)

    def arrival(self, pred: LinePredicate, timeout_s: float) -> float | None:
        """When the first line `pred` accepts came (monotonic), or None if none came in
        time: for measuring, where a missing line is a result, not a failure."""
        try:
            return self.wait_line(pred, timeout_s)[0]
        except AssertionError:
            return None

    def why(self) -> str:
        """The last log lines and stderr, for a failure message."""
        with self._lock:
            last = [json.dumps(line)[:300] for _, line in self.lines[-3:]]
        return f"last lines: {last}; stderr: {self.stderr_tail()}"

    def stderr_tail(self, chars: int = 2000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
        """(HTTP status, body) of a GET on the metrics port; (-1, why) if it did not answer."""
        try:
            url = f"http://127.0.0.1:{self.port}{path}"
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                return int(response.status), response.read().decode()
        except OSError as exc:
            return -1, str(exc)

    def metrics(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200, f"/metrics: {status} {body}; {self.state()}"
        return body

    def state(self) -> str:
        """Whether the agent still runs (or how it exited), with its last lines and stderr."""
        code = self.proc.poll()
        alive = "running" if code is None else f"exited {code}"
        return f"oomwatch run {alive}; {self.why()}"

    def healthz(self) -> int:
        return self.get("/healthz")[0]

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        def healthy() -> bool | None:
            if self.healthz() == 200:
                return True
            if self.proc.poll() is not None:
                self._reader.join(2)
                raise AssertionError(f"oomwatch run exited {self.proc.returncode}: {self.why()}")
            return None

        until("oomwatch run healthy", healthy, timeout_s, interval_s=0.1, why=self.why)

    def status(self) -> dict[str, int]:
        """VmRSS, VmHWM (KiB) and Threads of the agent process."""
        out: dict[str, int] = {}
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM", "Threads"):
                    out[key] = int(value.split()[0])
        return out

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self) -> int:
        """SIGTERM (SIGCONT first, should a test have stopped it), SIGKILL after 20 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return int(self.proc.returncode)


@contextlib.contextmanager
def agent_thread(config: DaemonConfig) -> Iterator[Agent]:
    """The agent of `config` running its loop on a thread; stopped (and joined) afterwards."""
    agent = Agent(config)
    loop = threading.Thread(target=agent.run, daemon=True)
    loop.start()
    try:
        yield agent
    finally:
        agent.stop()
        loop.join(10)
        assert not loop.is_alive(), "the agent's loop did not stop in 10 s"


def seed_cursor_at_log_end(state_dir: Path) -> None:
    """Start the daemon after everything already in the ring (other engineers' kills)."""
    start_at_log_end(state_dir)


class DaemonProcess(AgentProcess):
    """`oomwatch run` over this machine's cgroups and kernel log ."""

    def __init__(self, state_dir: Path, *extra: str, kubeconfig: Path | None = None) -> None:
        super().__init__(
            ["--cgroup-root", "/sys/fs/cgroup", *extra], state_dir=state_dir, kubeconfig=kubeconfig
        )


def victim_is(pid: int) -> Callable[[dict[str, object]], bool]:
    """Selects the `oom_kill` log line whose victim is `pid`."""
    return lambda line: line.get("event") == "oom_kill" and line.get("process.pid") == pid


E2E_NODE = "e2e-node"  # the node the real-kernel cluster tests' agent runs as


def connected_agent(tmp: Path, server: str, extra_args: list[str]) -> AgentProcess:
    """`oomwatch run` connected to the fake API server at `server` ."""
    return AgentProcess(
        [f"--node-name={E2E_NODE}", *extra_args],
        state_dir=tmp / "state",
        kubeconfig=kubeconfig(tmp / "kubeconfig", server),
        ready=None,  # each test waits for `started` as long as its kernel needs
    )


def started_and_watching(
    agent: AgentProcess, api: FakeApiServer, timeout_s: float = 60.0
) -> LogLine:
    """The agent's `started` line, once it also watches the fake API server's pods (a kill
    before that would find no pod to name)."""
    _, started = agent.wait_line(lambda line: line.get("event") == "started", timeout_s)
    api.wait_for(lambda a: ("watch", "", "pods") in a.seen(), timeout_s=timeout_s)
    return started
