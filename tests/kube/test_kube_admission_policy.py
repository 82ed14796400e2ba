"""The annotate component's ValidatingAdmissionPolicy, evaluated as the API server would.

The opt-in annotation component needs cluster-wide `pods/patch`, enough to change any pod's
image.  RBAC cannot narrow that grant; the policy does.  Its CEL expressions are
evaluated here with cel-python (plain CEL: the policy uses no optional-type syntax), with the
API server's rules around them: a policy applies when every match condition is true, and
admits a request only when every validation is true (an error denies: failurePolicy Fail).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support.admission import admits
from support.manifests import ANNOTATE_DIR, documents

AGENT = "system:serviceaccount:oomwatch:oomwatch"
NODE_CLAIM = "authentication.kubernetes.io/node-name"
KEY = "oomwatch.io/last-oom-kill"


def policy() -> dict[str, Any]:
    (found,) = [
        d
        for d in documents(ANNOTATE_DIR / "admission-policy.yaml")
        if d["kind"] == "ValidatingAdmissionPolicy"
    ]
    return found


def admitted(request: dict[str, Any], old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    activation: dict[str, Any] = {"request": request, "object": new, "oldObject": old}
    return admits(policy()["spec"], activation)


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-0",
        "namespace": "shop",
        "labels": {"app": "web"},
        "annotations": {"team": "shop"},
        "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "uid": "1"}],
    },
    "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "web:1"}]},
}


def request(
    node: str | None = "node-a", user: str = AGENT, operation: str = "UPDATE", sub: str = ""
) -> dict[str, Any]:
    info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts"]}
    if node is not None:
        info["extra"] = {NODE_CLAIM: [node], "authentication.kubernetes.io/pod-name": ["o-1"]}
    return {"operation": operation, "subResource": sub, "userInfo": info}


def annotated(pod: dict[str, Any], **annotations: str) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["metadata"].setdefault("annotations", {}).update(annotations)
    return out


def test_the_agent_may_set_and_update_its_annotation_on_its_nodes_pods() -> None:
    first = annotated(POD, **{KEY: '{"kind":"memcg"}'})
    assert admitted(request(), POD, first)
    assert admitted(request(), first, annotated(first, **{KEY: '{"kind":"global"}'}))
    bare: dict[str, Any] = copy.deepcopy(POD)
    del bare["metadata"]["annotations"]
    assert admitted(request(), bare, annotated(bare, **{KEY: "{}"}))


def changed(path: str, value: Any) -> dict[str, Any]:
    out = annotated(POD, **{KEY: "{}"})
    *parents, last = path.split(".")
    node: Any = out
    for part in parents:
        node = node[part]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return out


@pytest.mark.parametrize(
    ("why", "req", "new"),
    [
        ("another node's pod", request(node="node-b"), annotated(POD, **{KEY: "{}"})),
        ("no node-name claim (old cluster, or not a pod's token)", request(node=None),
         annotated(POD, **{KEY: "{}"})),
        ("the image: what the cluster-wide grant allowed", request(),
         changed("spec.containers", [{"name": "app", "image": "evil:1"}])),
        ("another annotation added", request(), annotated(POD, **{KEY: "{}", "x": "1"})),
        ("another annotation changed", request(), annotated(POD, **{KEY: "{}", "team": "evil"})),
        ("another annotation removed", request(), changed("metadata.annotations", {KEY: "{}"})),
        ("a label", request(), changed("metadata.labels", {"app": "web", "evil": "1"})),
        ("the labels removed", request(), changed("metadata.labels", None)),
        ("owner references", request(), changed("metadata.ownerReferences", None)),
        ("a finalizer", request(), changed("metadata.finalizers", ["x/y"])),
        ("a subresource (ephemeral containers)", request(sub="ephemeralcontainers"),
         annotated(POD, **{KEY: "{}"})),
        ("a delete", request(operation="DELETE"), annotated(POD, **{KEY: "{}"})),
        ("a create", request(operation="CREATE"), annotated(POD, **{KEY: "{}"})),
    ],
)  # fmt: skip
def test_anything_else_by_the_agent_is_denied(
    why: str, req: dict[str, Any], new: dict[str, Any]
) -> None:
    old = None if req["operation"] == "CREATE" else POD
    assert not admitted(req, old, new), why


def test_the_policy_leaves_everyone_else_alone() -> None:
    other = request(user="system:serviceaccount:kube-system:replicaset-controller")
    assert admitted(other, POD, changed("spec.containers", [{"name": "app", "image": "v:2"}]))


def test_the_binding_denies_and_the_policy_fails_closed() -> None:
    spec = policy()["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["pods", "pods/*"]
    (binding,) = [
        d
        for d in documents(ANNOTATE_DIR / "admission-policy.yaml")
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    ]
    assert binding["spec"] == {"policyName": "oomwatch-annotate", "validationActions": ["Deny"]}
