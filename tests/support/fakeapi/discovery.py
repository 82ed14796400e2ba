"""API discovery as the fake API server answers it (what kubectl asks first)."""

from __future__ import annotations

import copy
from typing import Any


def _resources(group_version: str, *rows: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {"name": name, "singularName": "", "namespaced": True, "kind": kind, "verbs": verbs}
            for name, kind, verbs in rows
        ],
    }


_EVENTS_GV = {"groupVersion": "events.k8s.io/v1", "version": "v1"}
_OOMI_GV = {"groupVersion": "oomwatch.io/v1alpha1", "version": "v1alpha1"}
DISCOVERY: dict[str, dict[str, Any]] = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "events.k8s.io", "versions": [_EVENTS_GV], "preferredVersion": _EVENTS_GV}]},
    "/api/v1": _resources("v1", ("pods", "Pod", ["get", "list", "watch", "patch"]),
                          ("pods/exec", "PodExecOptions", ["create", "get"]),
                          ("events", "Event", ["list"])),
    "/apis/events.k8s.io/v1": _resources("events.k8s.io/v1",
                                         ("events", "Event", ["create", "patch", "list"])),
    "/apis/oomwatch.io/v1alpha1": _resources(
        "oomwatch.io/v1alpha1", ("oomincidents", "OOMIncident",
                                 ["create", "delete", "get", "list", "patch"])),
}  # fmt: skip
DISCOVERY["/apis/oomwatch.io/v1alpha1"]["resources"][0].update(
    singularName="oomincident", shortNames=["oomi"], categories=["oomwatch"]
)


def discovery(path: str, crd_installed: bool) -> dict[str, Any]:
    """Discovery as the API server answers it, the oomwatch.io group only with its CRD."""
    doc = copy.deepcopy(DISCOVERY[path])
    if path == "/apis" and crd_installed:
        doc["groups"].append(
            {"name": "oomwatch.io", "versions": [_OOMI_GV], "preferredVersion": _OOMI_GV}
        )
    if path == "/apis/oomwatch.io/v1alpha1" and not crd_installed:
        doc["resources"] = []
    return doc
