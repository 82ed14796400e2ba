"""ValidatingAdmissionPolicies evaluated with cel-python as the API server would: a policy
applies when every match condition is true, admits only when every validation is true, and
an evaluation error denies (failurePolicy Fail).  With the probe-pod-dirs component's pods
(`trainer`, its volumes and mounts) for the manifest and chart tests."""

from __future__ import annotations

from typing import Any

import celpy

from support.manifests import DAEMONSET_DIR, documents


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    to_cel = celpy.json_to_cel  # type: ignore[attr-defined]  # celpy re-exports it untyped
    return program.evaluate({k: to_cel(v) for k, v in activation.items()})


def admits(spec: dict[str, Any], activation: dict[str, Any]) -> bool:
    """Whether the policy `spec` admits the request in `activation`."""
    if not all(evaluate(c["expression"], activation) for c in spec["matchConditions"]):
        return True  # the policy does not apply to this request
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
        except Exception:  # an evaluation error: failurePolicy Fail denies
            return False
    return True


COMPONENT = DAEMONSET_DIR / "components" / "probe-pod-dirs"
UID_ENV = {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}


def admitted(
    pod: dict[str, Any], namespace: str = "ml", policy: dict[str, Any] | None = None
) -> bool:
    """Whether `policy` (the component's, unless given: the chart renders its own) admits `pod`."""
    if policy is None:
        (policy,) = [
            d
            for d in documents(COMPONENT / "admission-policy.yaml")
            if d["kind"] == "ValidatingAdmissionPolicy"
        ]
    activation: dict[str, Any] = {
        "request": {"namespace": namespace, "operation": "CREATE"},
        "object": pod,
    }
    return admits(policy["spec"], activation)


def trainer(
    volume: dict[str, Any],
    mount: dict[str, Any],
    env: list[dict[str, Any]] | None = None,
    where: str = "containers",
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "trainer",
        "image": "t:1",
        "env": [UID_ENV] if env is None else env,
        "volumeMounts": [{"name": "probe", "mountPath": "/var/run/oomwatch/probe", **mount}],
    }
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "m:1"}],
        "volumes": [{"name": "probe", **volume}],
    }
    spec.setdefault(where, []).append(container)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": spec,
    }


HOST = {"hostPath": {"path": "/var/run/oomwatch/probe", "type": "Directory"}}
CLAIM = {"persistentVolumeClaim": {"claimName": "oomwatch-probe"}}
OWN = {"subPathExpr": "$(POD_UID)"}
