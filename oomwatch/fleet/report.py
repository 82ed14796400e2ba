"""`kubectl oomwatch report TYPE/NAME`: the post-mortem from the `OOMIncident` objects of the
namespace, printed by `oomwatch report`'s own renderer (the same text, the same escaping).

Reading needs only what viewing the namespace grants (`get`/`list` oomincidents, aggregated
into `view`); nothing runs in the agent.  Every string came from the API: the renderer
escapes what it prints, and the lines this module adds go through `escape_control` too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oomwatch.incident import Incident
from oomwatch.kube.oomincident import GROUP, PLURAL, read_incident
from oomwatch.sanitize import escape_control as esc

RESOURCE = f"{PLURAL}.{GROUP}"
# kubectl's names and short names of the owners oomwatch names workloads by.
_KINDS = {
    "deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
    "sts": "StatefulSet", "statefulset": "StatefulSet", "statefulsets": "StatefulSet",
    "ds": "DaemonSet", "daemonset": "DaemonSet", "daemonsets": "DaemonSet",
    "job": "Job", "jobs": "Job", "cronjob": "CronJob", "cj": "CronJob", "cronjobs": "CronJob",
    "rs": "ReplicaSet", "replicaset": "ReplicaSet", "replicasets": "ReplicaSet",
}  # fmt: skip
# A node name is a DNS subdomain (RFC 1123): anything else is refused before it is used.
_NODE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class BadTarget(ValueError):
    """The TYPE/NAME given cannot name what the report is about."""


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # pod, node, or a workload kind (Deployment, ...)
    name: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.kind == "pod":
            return obj.get("pod") == self.name
        if self.kind == "node":
            return obj.get("node") == self.name
        return obj.get("workload") == f"{self.kind}/{self.name}"

    def words(self) -> str:
        return f"{self.kind}/{self.name}"


def parse_target(text: str) -> Target:
    """`pod/NAME`, `NAME` (a pod), `node/NAME`, `deploy/NAME`, `statefulset/NAME`, ..."""
    kind, slash, name = text.partition("/")
    if not slash:
        kind, name = "pod", text
    kind = kind.lower()
    if kind in ("po", "pod", "pods"):
        kind = "pod"
    elif kind in ("no", "node", "nodes"):
        kind = "node"
    elif kind in _KINDS:
        kind = _KINDS[kind]
    else:
        raise BadTarget(f"{esc(text)}: expected pod/NAME, node/NAME, deploy/NAME or NAME")
    if len(name) > 253 or not (_NODE if kind == "node" else _NAME).match(name):
        raise BadTarget(f"{esc(text)}: {esc(name)!r} is not a valid {kind} name")
    return Target(kind, name)


def select(items: Sequence[Any], target: Target) -> list[dict[str, Any]]:
    """The objects about `target`, the most recently seen last (as the report orders)."""
    chosen = [o for o in items if isinstance(o, dict) and target.matches(o)]
    return sorted(chosen, key=lambda o: str(o.get("lastSeen") or ""))


def incidents_of(objects: Sequence[dict[str, Any]]) -> tuple[list[Incident], list[str]]:
    """The incidents the objects carry, and one line per object saying what it counts."""
    incidents: list[Incident] = []
    lines: list[str] = []
    for obj in objects:
        incident = read_incident(obj)
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        if incident is None:
            lines.append(f"oomincident {where}: no incident record it can read")
            continue
        incidents.append(incident)
        lines.append(
            f"oomincident {where}: {obj.get('kills')} kill(s) of {obj.get('workload')}"
            f" container {obj.get('container') or '-'} on node {obj.get('node')},"
            f" {obj.get('firstSeen')} to {obj.get('lastSeen')}"
        )
    return incidents, [esc(line) for line in lines]


WIDE_COLUMNS = (
    "NAMESPACE",
    "NAME",
    "WORKLOAD",
    "CONTAINER",
    "KILLS",
    "LIMIT",
    "VERDICT",
    "NODE",
    "LAST SEEN",
)


def wide_table(objects: Sequence[dict[str, Any]]) -> str:
    """One row per object, every cell escaped (a cell can hold no newline or escape)."""
    rows: list[tuple[str, ...]] = [WIDE_COLUMNS]
    for obj in objects:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        cells = (
            meta.get("namespace"),
            meta.get("name"),
            obj.get("workload"),
            obj.get("container") or "-",
            obj.get("kills"),
            obj.get("limit"),
            obj.get("verdictCode"),
            obj.get("node"),
            obj.get("lastSeen"),
        )
        rows.append(tuple(esc(str(c)) for c in cells))
    widths = [max(len(r[i]) for r in rows) for i in range(len(WIDE_COLUMNS))]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )


def to_yaml(value: Any, indent: str = "") -> str:
    """Block YAML whose every string is a JSON-quoted scalar (escapes stay escapes)."""
    if isinstance(value, dict) and value:
        out = []
        for key, item in value.items():
            head = f"{indent}{json.dumps(str(key))}:"
            if isinstance(item, dict | list) and item:
                out.append(head + "\n" + to_yaml(item, indent + "  "))
            else:
                out.append(f"{head} {json.dumps(item)}\n")
        return "".join(out)
    if isinstance(value, list) and value:
        out = []
        for item in value:
            if isinstance(item, dict | list) and item:
                body = to_yaml(item, indent + "  ")
                out.append(f"{indent}- " + body[len(indent) + 2 :])
            else:
                out.append(f"{indent}- {json.dumps(item)}\n")
        return "".join(out)
    return f"{indent}{json.dumps(value)}\n"
