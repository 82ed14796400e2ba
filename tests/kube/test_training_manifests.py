"""examples/training/: the probe directory for training pods that Pod Security allows, and
PyTorch / TensorFlow Jobs that use it.  Every object validates against Kubernetes 1.33; the
pods pass Pod Security "restricted" (hence "baseline", which forbids hostPath); the volume is
the directory the DaemonSet reads; the probe's identity is what the agent can vouch for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TRAINING = REPO / "examples" / "training"
JOBS = ["pytorch-job.yaml", "tensorflow-job.yaml"]
# Pod Security "restricted": the volume types it allows (which excludes hostPath, as
# "baseline" does), and what every container must set.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((TRAINING / name).read_text()) if d]


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What Pod Security "restricted" (v1.33) would refuse in a pod spec."""
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(key)
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {volume['name']}: {sorted(kinds)}")
    pod_ctx = pod.get("securityContext", {})
    if (pod_ctx.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
        out.append("seccompProfile")
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        ctx = c.get("securityContext", {})
        if ctx.get("privileged") or ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: privilege escalation")
        caps = ctx.get("capabilities", {})
        if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: capabilities")
        if not (ctx.get("runAsNonRoot") or pod_ctx.get("runAsNonRoot")):
            out.append(f"{c['name']}: runAsNonRoot")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"{c['name']}: hostPort")
    return out


@pytest.mark.parametrize("name", ["probe-volume.yaml", *JOBS])
def test_every_object_validates(name: str) -> None:
    for doc in _docs(name):
        kubernetes_validate.validate(doc, "1.33.0", strict=True)


@pytest.mark.parametrize("name", JOBS)
def test_the_training_pods_pass_pod_security_restricted(name: str) -> None:
    [job] = _docs(name)
    pod = job["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    # ... and the checker does refuse what the DaemonSet's own pods need (hostPath, privilege)
    [daemonset] = [
        d for d in yaml.safe_load_all((REPO / "daemonset" / "daemonset.yaml").read_text()) if d
    ]
    refused = restricted_violations(daemonset["spec"]["template"]["spec"])
    assert any("hostPath" in r for r in refused) and any("privilege" in r for r in refused)


def test_the_claim_is_the_directory_the_agent_reads() -> None:
    pv, pvc = _docs("probe-volume.yaml")
    [daemonset] = [
        d for d in yaml.safe_load_all((REPO / "daemonset" / "daemonset.yaml").read_text()) if d
    ]
    [probe] = [v for v in daemonset["spec"]["template"]["spec"]["volumes"] if v["name"] == "probe"]
    assert pv["spec"]["hostPath"]["path"] == probe["hostPath"]["path"]
    assert pv["spec"]["claimRef"] == {
        "namespace": pvc["metadata"]["namespace"],
        "name": pvc["metadata"]["name"],
    }
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    for name in JOBS:
        [job] = _docs(name)
        assert job["metadata"]["namespace"] == pvc["metadata"]["namespace"]
        [claim] = [
            v for v in job["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v
        ]
        assert claim["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]


@pytest.mark.parametrize("name", JOBS)
def test_the_probe_knows_its_pod_and_the_agent_can_vouch_for_it(name: str) -> None:
    """The downward API names the pod, the container's name is the literal the probe needs, and
    the mount is the pod's own subdirectory: the agent believes the file's pod from that
    directory where the probe-pod-dirs admission policy enforces the mount
    (oomwatch.probe.identity; tests/kube/test_kube_probe_mount_policy.py admits these Jobs).
    A fixed non-root uid keeps the kernel kill's allocator join to the victim's files."""
    [job] = _docs(name)
    pod = job["spec"]["template"]["spec"]
    [trainer] = pod["containers"]
    env = {e["name"]: e for e in trainer["env"]}
    assert env["OOMWATCH_POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env["OOMWATCH_CONTAINER_NAME"]["value"] == trainer["name"]
    [mount] = [m for m in trainer["volumeMounts"] if m["name"] == "oomwatch-probe"]
    assert mount["mountPath"] == env["OOMWATCH_PROBE_DIR"]["value"]
    assert mount["subPathExpr"] == "$(OOMWATCH_POD_UID)"
    assert pod["securityContext"]["runAsUser"] > 0 and pod["securityContext"]["runAsNonRoot"]
