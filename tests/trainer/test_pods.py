"""The scenario pods: valid Kubernetes, trainer arguments the CLI accepts, probe wiring that
matches what the DaemonSet reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from examples.pruning_trainer.cli import parser

REPO = Path(__file__).resolve().parents[2]
PODS = sorted((REPO / "examples" / "pods").glob("*.yaml"))
SCENARIO_FLAGS = {
    "grand-chunk": "--grand-chunk",
    "leak": "--leak-mb-per-step",
    "shm-workers": "--shm",
    "cache-dataset": "--cache-dataset",
    "cuda-grand-chunk": "--device",
}


def _daemonset_probe_dir() -> str:
    for doc in yaml.safe_load_all((REPO / "daemonset" / "daemonset.yaml").read_text()):
        if doc and doc.get("kind") == "DaemonSet":
            volumes = doc["spec"]["template"]["spec"]["volumes"]
            return str(next(v for v in volumes if v["name"] == "probe")["hostPath"]["path"])
    raise AssertionError("no DaemonSet")


def test_one_pod_per_scenario() -> None:
    assert sorted(p.stem for p in PODS) == sorted(SCENARIO_FLAGS)


@pytest.mark.parametrize("path", PODS, ids=lambda p: p.stem)
def test_pod_runs_the_scenario_with_the_probe(path: Path) -> None:
    pod: dict[str, Any] = yaml.safe_load(path.read_text())
    (container,) = pod["spec"]["containers"]
    args = parser().parse_args(container["args"])
    assert SCENARIO_FLAGS[path.stem] in container["args"]
    assert args.score_only or args.retrain_epochs > 0
    env = {e["name"]: e for e in container["env"]}
    assert env["OOMWATCH_CONTAINER_NAME"]["value"] == container["name"]
    assert env["OOMWATCH_POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    probe_dir = env["OOMWATCH_PROBE_DIR"]["value"]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == probe_dir)
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == _daemonset_probe_dir()
    limits = container["resources"]["limits"]
    assert limits["memory"] == container["resources"]["requests"]["memory"]


@pytest.mark.parametrize("path", PODS, ids=lambda p: p.stem)
def test_pod_is_valid_kubernetes(path: Path) -> None:
    pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", "1.33.0", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
