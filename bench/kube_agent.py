"""What the Kubernetes integration adds to the agent: RSS and CPU, standalone vs connected.

    .venv/bin/python bench/kube_agent.py [seconds]

Runs `oomwatch run` twice on this machine for the same time: `--standalone`, then talking
to the local fake API server that holds a full node (110 pods, 3 containers each; a few pod
updates a second).  Prints resident memory (now and peak) and CPU use of the agent process.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).resolve().parents[1] / "tests")]

from kube_client import node_pods  # noqa: E402
from support.agent import AgentProcess  # noqa: E402
from support.fakeapi import NODE, FakeApiServer  # noqa: E402

TICK_S = os.sysconf("SC_CLK_TCK")


def measure(
    args: list[str], kubeconfig: Path | None, seconds: float, api: FakeApiServer | None
) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        agent = AgentProcess(
            [f"--node-name={NODE}", *args], state_dir=Path(tmp) / "state", kubeconfig=kubeconfig
        )
        with agent:
            time.sleep(5.0)  # start-up (backlog, first list) is not steady state
            pid = agent.proc.pid
            cpu0 = _cpu_s(pid)
            t0 = time.monotonic()
            i = 0
            while time.monotonic() - t0 < seconds:
                if api is not None:  # pod status churn, as restarts and probes cause
                    pod = node_pods()[i % 110]
                    pod["status"]["containerStatuses"][0]["restartCount"] = i
                    api.put_pod(pod)
                    i += 1
                time.sleep(0.25)
            cpu = (_cpu_s(pid) - cpu0) / (time.monotonic() - t0)
            status = agent.status()
        return status["VmRSS"] / 1024, status["VmHWM"] / 1024, cpu


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    rss, hwm, cpu = measure([], None, seconds, None)
    print(f"standalone: RSS {rss:.1f} MiB (peak {hwm:.1f}), CPU {cpu * 1000:.1f} millicores")
    api = FakeApiServer().start()
    try:
        for pod in node_pods():
            pod["spec"]["nodeName"] = NODE
            api.put_pod(pod)
        with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig", delete=False) as cfg:
            json.dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
                    "users": [{"name": "agent", "user": {}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent"}}],
                },
                cfg,
            )
        rss, hwm, cpu = measure([], Path(cfg.name), seconds, api)
        print(
            f"with Kubernetes (110 pods, 4 pod updates/s): RSS {rss:.1f} MiB (peak {hwm:.1f}),"
            f" CPU {cpu * 1000:.1f} millicores"
        )
        os.unlink(cfg.name)
    finally:
        api.stop()


if __name__ == "__main__":
    main()
