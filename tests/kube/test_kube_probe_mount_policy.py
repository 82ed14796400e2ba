"""The probe-pod-dirs component's ValidatingAdmissionPolicy, evaluated as the API server would
(issue 22): a pod may mount the node's probe directory only as its own per-pod directory, so
that directory is evidence of the pod a probe file speaks for (--probe-pod-dirs).

Evaluated with cel-python as tests/kube/test_kube_admission_policy.py does: the policy applies
when every match condition is true, admits only when every validation is true, and an
evaluation error denies (failurePolicy Fail).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from kube_manifests import DAEMONSET_DIR, documents
from test_kube_admission_policy import evaluate

COMPONENT = DAEMONSET_DIR / "components" / "probe-pod-dirs"
UID_ENV = {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}


def admitted(
    pod: dict[str, Any], namespace: str = "ml", policy: dict[str, Any] | None = None
) -> bool:
    """Whether `policy` (the component's, unless given: the chart renders its own) admits `pod`."""
    if policy is None:
        (policy,) = [d for d in documents(COMPONENT / "admission-policy.yaml")
                     if d["kind"] == "ValidatingAdmissionPolicy"]  # fmt: skip
    spec = policy["spec"]
    activation: dict[str, Any] = {"request": {"namespace": namespace, "operation": "CREATE"},
                                  "object": pod}  # fmt: skip
    if not all(evaluate(c["expression"], activation) for c in spec["matchConditions"]):
        return True
    variables: dict[str, Any] = {}
    for variable in spec["variables"]:
        variables[variable["name"]] = evaluate(
            variable["expression"], {**activation, "variables": variables}
        )
    activation["variables"] = variables
    for validation in spec["validations"]:
        try:
            if not evaluate(validation["expression"], activation):
                return False
        except Exception:
            return False
    return True


def trainer(volume: dict[str, Any], mount: dict[str, Any], env: list[dict[str, Any]] | None = None,
            where: str = "containers") -> dict[str, Any]:  # fmt: skip
    container: dict[str, Any] = {
        "name": "trainer", "image": "t:1", "env": [UID_ENV] if env is None else env,
        "volumeMounts": [{"name": "probe", "mountPath": "/var/run/oomwatch/probe", **mount}],
    }  # fmt: skip
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "m:1"}],
                            "volumes": [{"name": "probe", **volume}]}  # fmt: skip
    spec.setdefault(where, []).append(container)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t", "namespace": "ml"},
            "spec": spec}  # fmt: skip


HOST = {"hostPath": {"path": "/var/run/oomwatch/probe", "type": "Directory"}}
CLAIM = {"persistentVolumeClaim": {"claimName": "oomwatch-probe"}}
OWN = {"subPathExpr": "$(POD_UID)"}


@pytest.mark.parametrize("volume", [HOST, CLAIM])
def test_the_pods_own_directory_is_admitted(volume: dict[str, Any]) -> None:
    assert admitted(trainer(volume, OWN))


@pytest.mark.parametrize(
    ("volume", "mount", "env"),
    [
        (HOST, {}, None),  # the whole directory: every pod's files
        (CLAIM, {}, None),
        (HOST, {"subPath": "0b7a1c9e-another-pods-uid"}, None),  # another pod's directory
        (HOST, {"subPathExpr": "$(VICTIM)"}, [{"name": "VICTIM", "value": "0b7a1c9e"}]),
        (HOST, OWN, [UID_ENV, {"name": "POD_UID", "value": "0b7a1c9e"}]),  # overridden
        (HOST, {"subPathExpr": "$(POD_UID)/.."}, None),
        (HOST, {"subPathExpr": "$(POD_UID)", "subPath": "x"}, None),
        (HOST, OWN, []),  # POD_UID unset
        ({"hostPath": {"path": "/run/oomwatch/probe"}}, {}, None),  # /var/run is /run
        ({"hostPath": {"path": "/var/run/oomwatch/probe/"}}, {}, None),
    ],
)
def test_any_other_mount_of_the_probe_directory_is_denied(
    volume: dict[str, Any], mount: dict[str, Any], env: list[dict[str, Any]] | None
) -> None:
    assert not admitted(trainer(volume, mount, env))


@pytest.mark.parametrize("path", ["/", "/var/run", "/run/oomwatch", "/var/run/oomwatch/probe/x"])
def test_a_hostpath_above_or_inside_the_directory_is_denied(path: str) -> None:
    assert not admitted(trainer({"hostPath": {"path": path}}, OWN))


@pytest.mark.parametrize("where", ["initContainers", "ephemeralContainers"])
def test_init_and_ephemeral_containers_are_held_to_the_same_rule(where: str) -> None:
    assert admitted(trainer(HOST, OWN, where=where))
    assert not admitted(trainer(HOST, {}, where=where))


def test_pods_without_the_probe_volume_and_the_agents_namespace_are_untouched() -> None:
    plain = trainer({"emptyDir": {}}, {})
    assert admitted(plain)
    assert admitted({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "c", "image": "i"}]}})  # fmt: skip
    assert admitted(trainer(HOST, {}), namespace="oomwatch")


def test_the_shipped_training_jobs_are_admitted() -> None:
    for name in ("pytorch-job.yaml", "tensorflow-job.yaml"):
        path = DAEMONSET_DIR.parent / "examples" / "training" / name
        (job,) = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "Job"]
        pod = copy.deepcopy(job["spec"]["template"])
        pod.update(apiVersion="v1", kind="Pod")
        assert admitted(pod), name


def test_the_component_turns_the_flag_on() -> None:
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    (patch,) = component["patches"]
    (op,) = yaml.safe_load(patch["patch"])
    assert op["value"] == "--probe-pod-dirs"
