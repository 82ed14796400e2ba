"""What the Kubernetes integration adds to the agent: RSS and CPU, standalone vs connected.

    .venv/bin/python tests/kube/bench_agent_kube.py [seconds]

Runs `oomwatch run` twice on this machine for the same time: `--standalone`, then talking
to the local fake API server that holds a full node (110 pods, 3 containers each; a few pod
updates a second).  Prints resident memory (now and peak) and CPU use of the agent process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_kube import node_pods
from fakeapi import NODE, FakeApiServer

TICK_S = os.sysconf("SC_CLK_TCK")


def measure(
    args: list[str], env: dict[str, str], seconds: float, api: FakeApiServer | None
) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as state:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "oomwatch.cli",
                "run",
                f"--node-name={NODE}",
                f"--state-dir={state}",
                "--metrics-address=127.0.0.1:0",
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        time.sleep(5.0)  # start-up (imports, backlog, first list) is not steady state
        cpu0 = _cpu_s(proc.pid)
        t0 = time.monotonic()
        i = 0
        while time.monotonic() - t0 < seconds:
            if api is not None:  # pod status churn, as restarts and probes cause
                pod = node_pods()[i % 110]
                pod["status"]["containerStatuses"][0]["restartCount"] = i
                api.put_pod(pod)
                i += 1
            time.sleep(0.25)
        cpu = (_cpu_s(proc.pid) - cpu0) / (time.monotonic() - t0)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        rss = _kb(status, "VmRSS") / 1024
        hwm = _kb(status, "VmHWM") / 1024
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        return rss, hwm, cpu


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK_S


def _kb(status: str, key: str) -> int:
    line = next(ln for ln in status.splitlines() if ln.startswith(key + ":"))
    return int(line.split()[1])


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    rss, hwm, cpu = measure(["--standalone"], dict(os.environ), seconds, None)
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
        env = {**os.environ, "KUBECONFIG": cfg.name}
        rss, hwm, cpu = measure([], env, seconds, api)
        print(
            f"with Kubernetes (110 pods, 4 pod updates/s): RSS {rss:.1f} MiB (peak {hwm:.1f}),"
            f" CPU {cpu * 1000:.1f} millicores"
        )
        os.unlink(cfg.name)
    finally:
        api.stop()


if __name__ == "__main__":
    main()
