"""The chart's own DaemonSet pod, started on this machine by podman (`podman kube play`).

`chart_pod_manifest` turns the DaemonSet that `helm template` renders into the Pod a kubelet
would start from it, changed only where this machine is not a Kubernetes node:
- kube-rbac-proxy is left out: its image (quay.io) cannot be pulled here, and it only guards
  the metrics port, which the tests read from inside the pod as it would;
- the projected service-account token volume (`api-token`) and its mounts are left out:
  there is no API server (the agent then runs standalone, as it logs) and podman cannot make
  a projected volume;
- the node's directories (hostPath state and probe) become the test's own directories;
- `env` from the field `spec.nodeName` becomes its value, this host's name: podman 4.3's
  kube play refuses that fieldRef ("not valid or not supported");
- scheduling fields (service account, priority class, node selector, tolerations, affinity)
  mean nothing to one machine and are dropped.
Everything else (commands, args, env, securityContext, the emptyDirs, the /dev/kmsg and
/sys/fs/cgroup hostPaths, the init container) is played as rendered.  `ChartPod` plays it,
streams the agent's log lines with their arrival times, execs into containers and removes
the pod.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from support import until, wait_for

LogLine = dict[str, Any]
LEFT_OUT_CONTAINERS = frozenset({"kube-rbac-proxy"})
LEFT_OUT_VOLUMES = frozenset({"api-token"})
SCHEDULING_FIELDS = (
    "serviceAccountName",
    "automountServiceAccountToken",
    "priorityClassName",
    "nodeSelector",
    "tolerations",
    "affinity",
)


def podman_unavailable_reason() -> str | None:
    """Why a pod cannot be played here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed (./dev.sh image installs it)"
    if not Path("/proc/self/status").read_text().count("Uid:\t0\t"):
        return "podman kube play with a privileged container needs root"
    return None


def image_build_failure(timeout_s: float = 900.0) -> str | None:
    """Wait for the image `./dev.sh test` builds beside the suite; why it failed, or None.

    dev.sh names the build's log in OOMWATCH_IMAGE_BUILD_LOG and writes the build's exit
    status beside it (`.status`) when it ends; without the variable there is nothing to wait for.
    """
    log = os.environ.get("OOMWATCH_IMAGE_BUILD_LOG")
    if not log:
        return None
    status = Path(f"{log}.status")
    if not wait_for(status.exists, timeout_s, interval_s=1.0):
        return f"the image build ({log}) did not end within {timeout_s:.0f} s"
    code = status.read_text().strip()
    if code == "0":
        return None
    tail = Path(log).read_text(errors="replace")[-4000:]
    return f"the image build failed (exit status {code}); the tail of {log}:\n{tail}"


def image_present(ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], check=False).returncode == 0


def chart_pod_manifest(docs: list[dict[str, Any]], name: str, host_dirs: dict[str, Path]) -> Any:
    """The Pod the rendered DaemonSet's template makes, as the module docstring says."""
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    template = daemonset["spec"]["template"]
    spec = dict(template["spec"])
    for field in SCHEDULING_FIELDS:
        spec.pop(field, None)
    spec["containers"] = [
        _without_volumes(c) for c in spec["containers"] if c["name"] not in LEFT_OUT_CONTAINERS
    ]
    spec["initContainers"] = [_without_volumes(c) for c in spec.get("initContainers", [])]
    volumes = []
    for volume in spec["volumes"]:
        if volume["name"] in LEFT_OUT_VOLUMES:
            continue
        if volume["name"] in host_dirs:
            volume = {**volume, "hostPath": {**volume["hostPath"]}}
            volume["hostPath"]["path"] = str(host_dirs[volume["name"]])
        volumes.append(volume)
    spec["volumes"] = volumes
    spec["restartPolicy"] = "Never"  # a crash fails the test instead of hiding in restarts
    metadata = {"name": name, "labels": template["metadata"]["labels"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _without_volumes(container: dict[str, Any]) -> dict[str, Any]:
    mounts = [m for m in container.get("volumeMounts", []) if m["name"] not in LEFT_OUT_VOLUMES]
    env = [_node_name_filled(e) for e in container.get("env", [])]
    return {**container, "volumeMounts": mounts, **({"env": env} if env else {})}


def _node_name_filled(env: dict[str, Any]) -> dict[str, Any]:
    field = env.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    return {"name": env["name"], "value": os.uname().nodename} if field == "spec.nodeName" else env


class ChartPod:
    """`podman kube play` of `manifest`; `podman logs -f` of its agent, line by line."""

    def __init__(self, manifest: Any, workdir: Path) -> None:
        self.name: str = manifest["metadata"]["name"]
        self.path = workdir / f"{self.name}.yaml"
        self.path.write_text(yaml.safe_dump(manifest, sort_keys=False))
        played = self.podman("kube", "play", str(self.path), timeout_s=180)
        if played.returncode != 0:
            raise AssertionError(f"podman kube play: {played.stderr[-3000:]}")
        self.play_output = played.stdout + played.stderr
        self.lines: list[tuple[float, LogLine]] = []
        self._lock = threading.Lock()
        self._logs = subprocess.Popen(
            ["podman", "logs", "-f", self.container("agent")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()

    def container(self, name: str) -> str:
        return f"{self.name}-{name}"  # how kube play names a pod's containers

    @staticmethod
    def podman(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args], capture_output=True, text=True, timeout=timeout_s, check=False
        )

    def exec(self, container: str, *argv: str) -> subprocess.CompletedProcess[str]:
        """`podman exec` in one of the pod's containers (what `kubectl exec -c` does)."""
        return self.podman("exec", self.container(container), *argv)

    def get(self, container: str, url: str) -> tuple[int, str]:
        """(status, body) of an HTTP GET made inside `container` (the pod's network)."""
        code = (
            "import sys, urllib.request\n"
            "with urllib.request.urlopen(sys.argv[1], timeout=5) as r:\n"
            "    print(r.status); sys.stdout.write(r.read().decode())\n"
        )
        out = self.exec(container, "python", "-c", code, url)
        if out.returncode != 0:
            return -1, out.stderr[-1000:]
        status, _, body = out.stdout.partition("\n")
        return int(status), body

    def state(self, container: str) -> str:
        out = self.podman("inspect", "--format", "{{.State.Status}}", self.container(container))
        return out.stdout.strip()

    def _read(self) -> None:
        assert self._logs.stdout is not None
        for raw in self._logs.stdout:
            try:
                entry = json.loads(raw)
            except ValueError:
                entry = {"event": "unparsable", "raw": raw.decode(errors="replace")}
            with self._lock:
                self.lines.append((time.monotonic(), entry))

    def wait_line(self, pred: Any, timeout_s: float) -> tuple[float, LogLine]:
        """The first agent log line `pred` accepts and when it arrived (monotonic)."""

        def came() -> tuple[float, LogLine] | None:
            with self._lock:
                return next(((t, e) for t, e in self.lines if pred(e)), None)

        return until("a matching agent log line", came, timeout_s, interval_s=0.01, why=self.why)

    def why(self) -> str:
        with self._lock:
            last = [json.dumps(line)[:300] for _, line in self.lines[-5:]]
        relay = self.podman("logs", "--tail", "5", self.container("kmsg-relay"))
        states = {c: self.state(c) for c in ("prepare-dirs", "kmsg-relay", "agent")}
        return f"states {states}; agent's last lines {last}; relay: {relay.stdout[-500:]}"

    def remove(self) -> None:
        self.podman("pod", "rm", "--force", "--time", "5", self.name, timeout_s=120)
        self._logs.kill()
        self._logs.wait()
        self._reader.join(5)
