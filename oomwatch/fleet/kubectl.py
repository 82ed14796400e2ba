"""The plugin reaches the cluster through kubectl itself: the user's credentials, context,
auth plugins and exec transport are then exactly kubectl's, and the plugin needs no client
library (a stdlib zipapp installs anywhere python3 runs).  kubectl pages long lists by
itself (`--chunk-size`)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

DEFAULT_CHUNK = 500


class KubectlError(Exception):
    """kubectl failed; the message is what it said."""


class Kubectl:
    """`kubectl [--kubeconfig F] [--context C] ...`, JSON in, JSON out."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        binary: str | None = None,
        chunk_size: int = DEFAULT_CHUNK,
    ) -> None:
        self.prefix = [binary or os.environ.get("KUBECTL") or "kubectl"]
        if kubeconfig:
            self.prefix += ["--kubeconfig", kubeconfig]
        if context:
            self.prefix += ["--context", context]
        self.chunk_size = chunk_size

    def get(self, *args: str, not_found_ok: bool = False) -> dict[str, Any] | None:
        """`kubectl get ARGS -o json`; None for a missing object when `not_found_ok`."""
        argv = [*self.prefix, "get", *args, "-o", "json", f"--chunk-size={self.chunk_size}"]
        if not_found_ok:
            argv.append("--ignore-not-found")
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KubectlError(f"{self.prefix[0]}: {exc}") from exc
        if done.returncode != 0:
            raise KubectlError(done.stderr.strip() or f"kubectl get exited {done.returncode}")
        if not done.stdout.strip():
            return None  # --ignore-not-found and nothing there
        try:
            data = json.loads(done.stdout)
        except ValueError as exc:
            raise KubectlError(f"kubectl get {' '.join(args)}: not JSON ({exc})") from exc
        return data if isinstance(data, dict) else None

    def namespace(self) -> str:
        """The context's namespace (`default` when it names none)."""
        argv = [*self.prefix, "config", "view", "--minify", "-o", "jsonpath={..context.namespace}"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            return "default"
        return done.stdout.strip() or "default"
