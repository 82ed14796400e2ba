"""`oomwatch run` as a subprocess for the end-to-end probe tests, and reading its results."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support import free_port

from oomwatch.incident import Incident
from oomwatch.store import IncidentStore, StoreError

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Agent:
    state_dir: Path
    probe_dir: Path
    port: int

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def wait_for(self, wanted: Callable[[Incident], bool], timeout_s: float = 30) -> list[Incident]:
        """The stored incidents that `wanted` accepts, once there is one (or [] at timeout)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                store = IncidentStore.open_readonly(self.state_dir)
            except StoreError:
                continue  # not created yet
            found = [i for i in store.query() if wanted(i)]
            store.close()
            if found:
                return found
        return []


@contextmanager
def running_agent(tmp_path: Path) -> Iterator[Agent]:
    """A standalone agent with a probe directory, healthy before the block runs."""
    agent = Agent(tmp_path / "state", tmp_path / "probe", free_port())
    agent.probe_dir.mkdir()
    command = [
        sys.executable, "-m", "oomwatch.cli", "run", "--standalone",
        "--state-dir", str(agent.state_dir), "--probe-dir", str(agent.probe_dir),
        "--metrics-address", f"127.0.0.1:{agent.port}",
        "--cgroup-root", "/sys/fs/cgroup/memory",
    ]  # fmt: skip
    daemon = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                url = f"http://127.0.0.1:{agent.port}/healthz"
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert daemon.poll() is None, daemon.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, "daemon not healthy in 60 s"
            time.sleep(0.5)
        yield agent
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
