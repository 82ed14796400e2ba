"""`kubectl kustomize` for the features `daemonset/` uses, in Python, so the build check
never depends on a kubectl being installed (Debian's kubectl 1.20 predates components).

Supported: `resources` (files and directories), `components`, `patches` (inline RFC 6902
JSON patches aimed by kind/name), and `images` (newName, newTag or digest on pod-template
containers).
Any other key or patch form raises, so a kustomization that outgrows this fails loudly
instead of building something else.  When kubectl is installed, a test compares the two.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "components", "patches", "images"}
TARGET_KEYS = {"kind", "name"}


def build(directory: Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize directory` would print, in resource order."""
    spec = _kustomization(directory, "Kustomization")
    objects = _resources(directory, spec)
    for component in spec.get("components", []):
        component_dir = (directory / component).resolve()
        component_spec = _kustomization(component_dir, "Component")
        objects += _resources(component_dir, component_spec)
        objects = _patched(objects, component_spec.get("patches", []))
    objects = _patched(objects, spec.get("patches", []))
    return [_with_images(o, spec.get("images", [])) for o in objects]


def _kustomization(directory: Path, kind: str) -> dict[str, Any]:
    path = directory / "kustomization.yaml"
    spec: dict[str, Any] = yaml.safe_load(path.read_text())
    unknown = spec.keys() - KUSTOMIZATION_KEYS
    if unknown:
        raise ValueError(f"{path}: unsupported kustomization keys {sorted(unknown)}")
    if spec.get("kind", "Kustomization") != kind:
        raise ValueError(f"{path}: expected kind {kind}, got {spec.get('kind')}")
    return spec


def _resources(directory: Path, spec: dict[str, Any]) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for resource in spec.get("resources", []):
        path = (directory / resource).resolve()
        if path.is_dir():
            objects += build(path)
        else:
            objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return objects


def _patched(objects: list[dict[str, Any]], patches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for patch in patches:
        target = patch["target"]
        if patch.keys() != {"target", "patch"} or not target.keys() <= TARGET_KEYS:
            raise ValueError(f"unsupported patch form: {patch}")
        operations = yaml.safe_load(patch["patch"])
        if not isinstance(operations, list):
            raise ValueError(f"only RFC 6902 (list) patches are supported: {patch['patch']!r}")
        hits = [o for o in objects
                if all(_field(o, key) == value for key, value in target.items())]
        if not hits:
            raise ValueError(f"patch target matches nothing: {target}")
        objects = [_json_patch(o, operations) if o in hits else o for o in objects]
    return objects


def _field(obj: dict[str, Any], key: str) -> Any:
    return obj["metadata"]["name"] if key == "name" else obj.get(key)


def _json_patch(obj: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/replace/remove (what kustomize applies for an inline JSON patch)."""
    result = copy.deepcopy(obj)
    for op in operations:
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].split("/")[1:]]
        node: Any = result
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if op["op"] not in ("add", "replace", "remove"):
            raise ValueError(f"unsupported JSON patch op {op['op']!r}")
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if op["op"] == "add":
                node.insert(index, op["value"])
            elif op["op"] == "replace":
                node[index] = op["value"]
            else:
                del node[index]
        elif op["op"] == "remove":
            del node[last]
        else:
            if op["op"] == "replace" and last not in node:
                raise ValueError(f"replace of a missing member: {op['path']}")
            node[last] = op["value"]
    return result


def _with_images(obj: dict[str, Any], images: list[dict[str, Any]]) -> dict[str, Any]:
    """kustomize's image transformer: newName, then a digest (`name@digest`) or newTag."""
    pod_spec = obj.get("spec", {}).get("template", {}).get("spec")
    if not images or pod_spec is None:
        return obj
    for container in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
        name, _, tag = container["image"].partition(":")
        for image in images:
            if image["name"] == name:
                new_name = image.get("newName", name)
                if "digest" in image:
                    container["image"] = f"{new_name}@{image['digest']}"
                elif image.get("newTag", tag):
                    container["image"] = f"{new_name}:{image.get('newTag', tag)}"
                else:
                    container["image"] = new_name
    return obj
