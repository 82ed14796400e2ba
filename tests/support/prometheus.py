"""Prometheus for the rule and fleet tests: finding promtool and prometheus (`tool`), and a
real Prometheus server on loopback (`PrometheusServer`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from support import free_port, until

IN_CI = bool(os.environ.get("CI"))


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} missing in CI: .ci/run installs Debian's prometheus package")
        pytest.skip(f"{name} not installed (apt-get install prometheus); CI installs it")
    return path


Samples = dict[str, list[tuple[dict[str, str], float]]]


def parsed_samples(exposition: str | bytes) -> Samples:
    """Sample name -> its (labels, value) rows, as `prometheus_client`'s parser reads the
    text (a second implementation checking the agent's own writer)."""
    text = exposition.decode() if isinstance(exposition, bytes) else exposition
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class PrometheusServer:
    """A Prometheus process on a free loopback port, with a temporary TSDB."""

    def __init__(
        self,
        binary: str,
        workdir: Path,
        *,
        rule_files: list[Path],
        targets: list[str],
        target_labels: dict[str, str] | None = None,
        interval_s: int = 1,
        static_configs: list[dict[str, Any]] | None = None,  # instead of targets + labels
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {
                "scrape_interval": f"{interval_s}s",
                "scrape_timeout": f"{interval_s}s",
                "evaluation_interval": f"{interval_s}s",
            },
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [
                {
                    "job_name": "oomwatch",
                    "honor_labels": True,
                    "static_configs": static_configs
                    if static_configs is not None
                    else ([{"targets": targets, "labels": target_labels or {}}] if targets else []),
                }
            ],
        }
        config_file = workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self.log_file = workdir / "prometheus.log"
        with self.log_file.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
            )

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        def ready() -> bool | None:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited {self.process.returncode}:\n{self.log()}")
            with contextlib.suppress(OSError):
                if http_get(self.url + "/-/ready", 1.0)[0] == 200:
                    return True
            return None

        until("prometheus ready", ready, timeout_s, interval_s=0.2, why=self.log)

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = http_get(f"{self.url}/api/v1/{path}{query}")
        reply = json.loads(body)
        if status != 200 or reply.get("status") != "success":
            raise AssertionError(f"GET /api/v1/{path} {params}: {status} {reply}")
        return reply["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
