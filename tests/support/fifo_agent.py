"""`oomwatch run` (and `oomwatch report`) as subprocesses for the attack-table tests and
bench/attacks.py: an agent over a fake cgroup tree and a FIFO, kills written to
it, its log lines with arrival times, its RSS and threads.

The code runs from the tree given as `repo` (PYTHONPATH), so bench/attacks.py can measure
the same attack on an older checkout (`git archive <commit> | tar -x -C /tmp/base`).
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.agent import AgentProcess
from support.cgroupfs import kubelet_container, memory_events

REPO = Path(__file__).resolve().parents[2]
REPORT = (REPO / "tests" / "daemon" / "data" / "memcg_kill.kmsg").read_bytes()
CONTAINER = next(
    part.split(b"=", 1)[1].decode()
    for line in REPORT.splitlines()
    for part in line.split(b",")
    if part.startswith(b"task_memcg=")
)


def kill_records(seq0: int, ts_us: int, pid: int, extra_tasks: int = 0) -> bytes:
    """The test report renumbered: kmsg seqs from `seq0`, time `ts_us`, victim `pid`, and
    `extra_tasks` more task-table rows (a container with that many processes)."""
    out: list[tuple[bytes, bytes]] = []
    for line in REPORT.splitlines():
        prefix, _, text = line.partition(b";")
        level = prefix.split(b",")[0]
        out.append((level, text.replace(b"9351", str(pid).encode())))
        if text.startswith(b"[  pid  ]"):
            out += [
                (
                    level,
                    f"[{pid + 1 + i:7d}]  1000 {pid + 1 + i:5d}    28749    11453     9792"
                    f"     1661         0   139264        0             0 worker-{i}".encode(),
                )
                for i in range(extra_tasks)
            ]
    return b"".join(
        b"%s,%d,%d,-;%s\n" % (level, seq0 + i, ts_us + i, text)
        for i, (level, text) in enumerate(out)
    )


class AgentProc(AgentProcess):
    """The agent over a fake host in `tmp`: tmp/cgroup (the report's container), tmp/kmsg.fifo
    (the relay's end, `fifo_fd`), tmp/probe and tmp/state; `kill()` writes a kernel kill."""

    def __init__(
        self,
        repo: Path,
        tmp: Path,
        *extra: str,
        kubeconfig: Path | None,
        wait_healthy: bool,
        launcher: Sequence[str] = (),
    ) -> None:
        cgroup = tmp / "cgroup"
        self.tmp = tmp
        self.container_dir = (
            kubelet_container(cgroup, CONTAINER)
            if not cgroup.exists()
            else cgroup / CONTAINER.strip("/")
        )
        self.probe_dir.mkdir(exist_ok=True)
        fifo = tmp / "kmsg.fifo"
        if not fifo.exists():
            os.mkfifo(fifo)
        self.fifo_fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        self.kills = 0
        self.seq = 100_000
        args = [
            "--probe-dir",
            str(self.probe_dir),
            "--cgroup-root",
            str(cgroup),
            "--kmsg",
            str(fifo),
            "--node-name",
            "node-a",
            *extra,
        ]
        try:
            super().__init__(
                args,
                state_dir=tmp / "state",
                kubeconfig=kubeconfig,
                repo=repo,
                ready="healthy" if wait_healthy else None,
                launcher=launcher,
            )
        except BaseException:
            os.close(self.fifo_fd)
            raise

    @property
    def probe_dir(self) -> Path:
        return self.tmp / "probe"

    def kill(self, extra_tasks: int = 0, *, now: bool = False) -> float:
        """A kernel kill through the FIFO and the container's counter; returns when written.
        Stamped now (`now`: CLOCK_MONOTONIC, as the kernel stamps), or at a fixed early time."""
        self.kills += 1
        stamp_us = int(time.monotonic() * 1e6) if now else 9_000_000_000 + self.kills * 10_000_000
        records = kill_records(self.seq, stamp_us, 20_000 + self.kills, extra_tasks)
        self.seq += records.count(b"\n") + 10
        written_at = time.monotonic()
        view = memoryview(records)
        while view:
            try:
                view = view[os.write(self.fifo_fd, view) :]
            except BlockingIOError:  # the FIFO is full: wait until the agent read some
                select.select([], [self.fifo_fd], [], 1.0)
        (self.container_dir / "memory.events").write_text(memory_events(self.kills, self.kills))
        return written_at

    def stop(self) -> int:
        code = super().stop()
        if self.fifo_fd >= 0:
            os.close(self.fifo_fd)
            self.fifo_fd = -1
        return code


def agent_env(repo: Path, kubeconfig: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OOMWATCH_", "KUBE"))}
    env["PYTHONPATH"] = str(repo)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


@contextmanager
def running_agent(
    repo: Path,
    tmp: Path,
    *extra: str,
    kubeconfig: Path | None = None,
    wait_healthy: bool = True,
    launcher: Sequence[str] = (),
) -> Iterator[AgentProc]:
    """An agent over tmp/cgroup, tmp/kmsg.fifo, tmp/probe and tmp/state (created if absent);
    `launcher` as in `AgentProcess`."""
    with AgentProc(
        repo, tmp, *extra, kubeconfig=kubeconfig, wait_healthy=wait_healthy, launcher=launcher
    ) as agent:
        yield agent


def imports_in(stderr: str) -> list[str]:
    """The module names of `-X importtime`'s lines (an agent started with it: `launcher`)."""
    return [
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "imported package" not in line
    ]


def peak_rss_kib(
    command: list[str],
    env: dict[str, str],
    cwd: Path,
    timeout_s: float,
    cap_kib: int,
    stdout: Path | None = None,
) -> dict[str, Any]:
    """Run a command to its end and measure its peak RSS (its VmHWM, polled every 20 ms);
    stop it at `timeout_s` or once its RSS passes `cap_kib` (the machine is shared).

    Not wait4's ru_maxrss: that counts the caller's own RSS, forked before the exec."""
    out = open(stdout, "wb") if stdout else subprocess.DEVNULL  # noqa: SIM115
    started = time.monotonic()
    proc = subprocess.Popen(
        command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE
    )
    err_lines: list[bytes] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    stopped, peak_kib = "", 0
    while proc.poll() is None:
        peak_kib = max(peak_kib, _status_kib(proc.pid, "VmHWM"))
        elapsed = time.monotonic() - started
        if not stopped and (peak_kib > cap_kib or elapsed > timeout_s):
            stopped = f"stopped at {elapsed:.0f} s, RSS {peak_kib // 1024} MiB"
            proc.kill()
        time.sleep(0.02)  # the interval of sampling its peak RSS, not a wait for something
    reader.join(5)
    if stdout:
        out.close()  # type: ignore[union-attr]
    return {
        "rc": proc.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "stopped": stopped,
        "stderr": b"".join(err_lines).decode(errors="replace")[-500:],
    }


def _status_kib(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def kernel_kill_logged(agent: AgentProc, pid: int, timeout_s: float) -> float | None:
    return agent.arrival(
        lambda line: line.get("event") == "oom_kill" and line.get("process.pid") == pid, timeout_s
    )
