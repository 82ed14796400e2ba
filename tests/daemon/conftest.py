"""Fixtures for the daemon's real-kernel tests: scratch memcgs and an `oomwatch run` process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from contract import validate_stored
from lab_fixtures import memcg_v1, scratch
from support import free_port, wait_for

from oomwatch.incident import Incident
from oomwatch.sources.kmsg import KmsgCursor, read_backlog, read_boot_id, record_seq
from oomwatch.store import IncidentStore

REPO = Path(__file__).resolve().parents[2]


def stored(state_dir: Path) -> list[Incident]:
    """Every incident the agent stored, read as `oomwatch report --store` would, each
    validated against the JSON contract (schemas/report.schema.json)."""
    reader = IncidentStore.open_readonly(state_dir)
    try:
        incidents = reader.query()
    finally:
        reader.close()
    for incident in incidents:
        validate_stored(incident.to_dict())
    return incidents


def seed_cursor_at_log_end(state_dir: Path) -> None:
    """Start the daemon after everything already in the ring (other engineers' kills)."""
    last = None
    for raw in read_backlog():
        last = record_seq(raw) if record_seq(raw) is not None else last
    store = IncidentStore(state_dir)
    try:
        if last is not None:
            store.save_cursor(KmsgCursor(read_boot_id(), last))
    finally:
        store.close()


class DaemonProcess:
    """`oomwatch run` as a subprocess; its JSON stdout lines are collected with arrival times.

    Standalone, or with `kubeconfig` the cluster it names (the fake API server)."""

    def __init__(self, state_dir: Path, *extra: str, kubeconfig: Path | None = None) -> None:
        self.state_dir = state_dir
        self.port = free_port()
        argv = [
            sys.executable,
            "-m",
            "oomwatch.cli",
            "run",
            *(["--standalone"] if kubeconfig is None else []),
            "--state-dir",
            str(state_dir),
            "--metrics-address",
            f"127.0.0.1:{self.port}",
            "--cgroup-root",
            "/sys/fs/cgroup",
            "--log-format",
            "json",
            *extra,
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
            env.pop("KUBERNETES_SERVICE_HOST", None)
        # stderr to a file: a pipe nobody reads would block a daemon that writes much there.
        self.stderr_path = state_dir.parent / f"daemon-{self.port}.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=REPO
            )
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_line(lambda e: e.get("event") == "started", timeout_s=30.0)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                entry = json.loads(raw)
            except ValueError:
                entry = {"event": "unparsable", "raw": raw.decode(errors="replace")}
            with self._lock:
                self.lines.append((time.monotonic(), entry))

    def events(self, pred: Callable[[dict[str, Any]], bool]) -> list[tuple[float, dict[str, Any]]]:
        with self._lock:
            return [(t, e) for t, e in self.lines if pred(e)]

    def wait_line(
        self, pred: Callable[[dict[str, Any]], bool], timeout_s: float = 5.0
    ) -> tuple[float, dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.events(pred)
            if found:
                return found[0]
            if self.proc.poll() is not None:
                err = self.stderr_path.read_text(errors="replace")
                raise AssertionError(f"oomwatch run exited {self.proc.returncode}: {err}")
            time.sleep(0.01)
        raise AssertionError(f"no matching log line in {timeout_s} s; last: {self.lines[-3:]}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def healthz(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as r:
            return int(r.status)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return int(self.proc.returncode)


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """Start `oomwatch run` processes on one temp state dir; all are stopped afterwards."""
    started: list[DaemonProcess] = []

    def start(*extra: str) -> DaemonProcess:
        daemon = DaemonProcess(tmp_path / "state", *extra)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.send_signal(signal.SIGCONT)
        daemon.stop()


__all__ = [
    "DaemonProcess",
    "free_port",
    "memcg_v1",
    "scratch",
    "seed_cursor_at_log_end",
    "stored",
    "wait_for",
]


def victim_is(pid: int) -> Callable[[dict[str, object]], bool]:
    """Selects the `oom_kill` log line whose victim is `pid`."""
    return lambda line: line.get("event") == "oom_kill" and line.get("process.pid") == pid
