"""What the fake API server stores and checks: pod objects, merge patches, Event validation."""

from __future__ import annotations

import copy
import uuid
from typing import Any

NODE = "node-a"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def validate_new_event(event: dict[str, Any], namespace: str, creating: bool) -> str | None:
    """The API server's checks for events.k8s.io/v1 (pkg/apis/core/validation/events.go)."""
    meta = event.get("metadata") or {}
    if creating and meta.get("namespace") not in (None, namespace):
        return "metadata.namespace does not match the request namespace"
    if not event.get("eventTime"):
        return "eventTime: Required value"
    if event.get("type") not in ("Normal", "Warning"):
        return "type: Unsupported value"
    for banned in ("firstTimestamp", "lastTimestamp", "count", "source", "deprecatedCount"):
        if creating and event.get(banned):
            return f"{banned}: Invalid value: needs to be unset"
    series = event.get("series")
    if series is not None and (series.get("count") or 0) < 2:
        return "series.count: Invalid value: should be at least 2"
    if not event.get("reportingController") or "/" not in event["reportingController"]:
        return "reportingController: Required value (qualified name)"
    if not event.get("reportingInstance") or len(event["reportingInstance"]) > 128:
        return "reportingInstance: Required value, at most 128 characters"
    for required in ("action", "reason"):
        if not event.get(required) or len(event[required]) > 128:
            return f"{required}: Required value, at most 128 characters"
    if len((event.get("note") or "").encode()) > 1024:  # Go's len(): bytes, not characters
        return "note: Too long: may not be longer than 1024"
    regarding = event.get("regarding") or {}
    if regarding.get("kind") == "Node" and namespace not in ("default", "kube-system"):
        return "namespace: events for cluster-scoped objects go in default or kube-system"
    if regarding.get("kind") == "Pod" and regarding.get("namespace") != namespace:
        return "regarding.namespace does not match the event namespace"
    return None


def running_status(
    container_id: str, name: str = "app", restarts: int = 0, **extra: Any
) -> dict[str, Any]:
    """A container status, running since one fixed time, as the API server serves it."""
    return {
        "name": name,
        "containerID": f"containerd://{container_id}",
        "restartCount": restarts,
        "state": {"running": {"startedAt": "2026-11-22T08:00:00Z"}},
        **extra,
    }


def make_pod(
    name: str = "web-7d4b9c8f6d-x2x9z",
    namespace: str = "shop",
    *,
    uid: str | None = None,
    node: str = NODE,
    containers: list[dict[str, Any]] | None = None,
    statuses: list[dict[str, Any]] | None = None,
    qos: str = "Burstable",
    owner: tuple[str, str] | None = ("ReplicaSet", "web-7d4b9c8f6d"),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    status_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod as the API server serves it (camelCase JSON), with sensible defaults."""
    containers = (
        containers
        if containers is not None
        else [
            {
                "name": "app",
                "resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "256Mi"}},
            },
        ]
    )
    statuses = (
        statuses
        if statuses is not None
        else [running_status(f"{'a' * 63}{i}", c["name"]) for i, c in enumerate(containers)]
    )
    for c in containers:
        c.setdefault("image", "registry.example/app:1.0")
    for s in statuses:
        s.setdefault("image", "registry.example/app:1.0")
        s.setdefault("imageID", "registry.example/app@sha256:" + "0" * 64)
        s.setdefault("ready", "running" in s.get("state", {}))
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or str(uuid.uuid4()),
        "labels": labels
        if labels is not None
        else {"app": "web", "pod-template-hash": "7d4b9c8f6d"},
    }
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": str(uuid.uuid4()),
                "controller": True,
            }
        ]
    if annotations:
        meta["annotations"] = annotations
    status: dict[str, Any] = {"phase": "Running", "qosClass": qos, "containerStatuses": statuses}
    status.update(status_extra or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node, "containers": containers},
        "status": status,
    }


def json_schema(openapi: Any) -> Any:
    """An OpenAPI v3 structural schema as JSON Schema: `nullable` becomes a `null` type, the
    `x-kubernetes-*` extensions are left to the API server (jsonschema ignores them)."""
    if isinstance(openapi, list):
        return [json_schema(item) for item in openapi]
    if not isinstance(openapi, dict):
        return openapi
    out = {k: json_schema(v) for k, v in openapi.items() if k != "nullable"}
    if openapi.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    if (
        out.get("type") == "object"
        and "properties" in out
        and not openapi.get("x-kubernetes-preserve-unknown-fields")
    ):
        out.setdefault("additionalProperties", False)  # the API server prunes unknown fields
    if out.get("format") == "date-time":
        out["pattern"] = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$"
    return out


def oomincident_problem(obj: dict[str, Any]) -> str | None:
    """What the API server would reject in an OOMIncident (its CRD's schema), or None."""
    import jsonschema

    from oomwatch.kube.crd import object_schema

    schema = json_schema(object_schema())
    schema["properties"]["metadata"] = {"type": "object"}
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=str)
    if errors:
        first = errors[0]
        return f"{'.'.join(str(p) for p in first.absolute_path)}: {first.message}"
    return None
