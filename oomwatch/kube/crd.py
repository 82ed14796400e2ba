"""The `OOMIncident` CustomResourceDefinition, its schema generated from the code's types.

The `incident` field's structural schema is derived from the `Incident` dataclasses, so the
schema the API server enforces and the object the agent writes cannot drift apart: a field
added to `Incident` is in the next generated CRD (tests/kube/test_oomincident.py checks the
shipped manifests equal `crd()`, and every object the agent writes against its schema).
Free-form maps of the diagnosis (`recommendation`, a finding's `evidence`, the allocator)
keep their unknown fields (`x-kubernetes-preserve-unknown-fields`).

    python -m oomwatch.kube.crd > daemonset/crd-oomincident.yaml
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from oomwatch.diagnosis_codes import FindingCode, VerdictCode
from oomwatch.incident import Incident
from oomwatch.kube.oomincident import (
    GROUP,
    KIND,
    MAX_ANALYSIS_BYTES,
    MAX_FINDINGS,
    MAX_VICTIMS,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)

_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean"}
_FREE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_CAPS = {"victims": MAX_VICTIMS, "findings": MAX_FINDINGS}
# Code sets that grow between versions: a plain string, so the API server takes another
# version's codes (their `Literal` is for the type checker only).
_OPEN_CODES = (FindingCode, VerdictCode)


def type_schema(hint: Any) -> dict[str, Any]:
    """An OpenAPI v3 (structural) schema for one annotated type."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        inner = type_schema(args[0]) if len(args) == 1 else {"type": "string"}
        return {**inner, "nullable": True}
    if any(hint == codes for codes in _OPEN_CODES):
        return {"type": "string"}
    if origin is Literal:
        values = get_args(hint)
        return {"type": _SCALARS[type(values[0])], "enum": list(values)}
    if origin is list:
        return {"type": "array", "items": type_schema(get_args(hint)[0])}
    if origin is dict:
        value = get_args(hint)[1]
        if value is Any:
            return dict(_FREE)
        return {"type": "object", "additionalProperties": type_schema(value)}
    if hint is Any:
        return {"x-kubernetes-preserve-unknown-fields": True}
    if is_typeddict(hint):  # keys vary by kind (`recommendation`): kept as written
        return dict(_FREE)
    if dataclasses.is_dataclass(hint):
        return dataclass_schema(hint)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    raise TypeError(f"no schema for {hint!r}")


def dataclass_schema(cls: Any) -> dict[str, Any]:
    hints = get_type_hints(cls, include_extras=False)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        schema = type_schema(hints[f.name])
        if f.name in _CAPS and cls is Incident:
            schema["maxItems"] = _CAPS[f.name]
        properties[f.name] = schema
        has_default = (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        if not has_default:
            required.append(f.name)
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def object_schema() -> dict[str, Any]:
    """The openAPIV3Schema of an `OOMIncident`."""
    incident = type_schema(Incident)
    incident["description"] = (
        "The latest kill's stored record (schemas/report.schema.json's Incident), trimmed:"
        " no task table, timeline samples or decoder notes; the node's store keeps them."
    )
    return {
        "type": "object",
        "description": "One OOM problem of one container on one node, written by its agent.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "analysis": _string(
                "`oomwatch report`'s text for the latest kill, escaped, for `kubectl describe`.",
                maxLength=MAX_ANALYSIS_BYTES,
            ),
            "workload": _string("The pod's owner as the API names it: Deployment/web, Pod/x."),
            "container": _string("The killed container (empty: a pod-level or node kill)."),
            "node": _string("The node whose agent saw the kills."),
            "pod": _string("The pod of the latest kill."),
            "verdictCode": _string("The diagnosis's verdict code (limit-container, ...)."),
            "verdict": _string("The stored diagnosis's verdict sentence, as stored."),
            "kills": {"type": "integer", "minimum": 1, "description": "Kills seen."},
            "firstSeen": _string("When the first of them was seen.", format="date-time"),
            "lastSeen": _string("When the latest was seen.", format="date-time"),
            "limit": _string("The memory limit at the latest kill (512Mi, none)."),
            "incident": incident,
        },
        "required": [
            "workload",
            "container",
            "node",
            "verdictCode",
            "verdict",
            "kills",
            "firstSeen",
            "lastSeen",
            "incident",
        ],
    }


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Workload", "type": "string", "jsonPath": ".workload"},
    {"name": "Container", "type": "string", "jsonPath": ".container"},
    {"name": "Kills", "type": "integer", "jsonPath": ".kills"},
    {"name": "Limit", "type": "string", "jsonPath": ".limit"},
    {"name": "Verdict", "type": "string", "jsonPath": ".verdictCode"},
    {"name": "Node", "type": "string", "jsonPath": ".node", "priority": 1},
    {"name": "Last Seen", "type": "date", "jsonPath": ".lastSeen", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition the chart and the kustomize base ship."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "oomwatch"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["oomwatch"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": object_schema()},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The manifest as YAML, in the order `crd()` builds it."""
    import yaml  # the agent's image has it (the Kubernetes client needs it); the plugin not

    header = (
        "# Generated by `python -m oomwatch.kube.crd` from oomwatch's types; do not edit"
        " (tests/kube/test_oomincident.py checks it).\n"
    )
    return header + str(yaml.safe_dump(crd(), sort_keys=False, width=100))


def main() -> None:
    sys.stdout.write(crd_yaml())


if __name__ == "__main__":
    main()
