"""`kubectl oomwatch report <pod>`: find the agent on the pod's node, run the report there.

The node comes from the pod; a pod already gone (deleted after its kill) is found through
its oomwatch Events, whose reporting instance names the agent's node.  The agent is the
running pod of the DaemonSet on that node; the report runs in its `agent` container with
`kubectl exec`, as the README's one-node command does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oomwatch.fleet.events import FIELD_SELECTOR
from oomwatch.fleet.kubectl import Kubectl

AGENT_NAMESPACE = "oomwatch"
AGENT_SELECTOR = "app.kubernetes.io/name=oomwatch"
AGENT_CONTAINER = "agent"
STORE = "/var/lib/oomwatch"


class NotFound(Exception):
    """What the plugin looked for and could not find, in words for the user."""


@dataclass(frozen=True, slots=True)
class Agent:
    namespace: str
    pod: str
    node: str


def node_of(kubectl: Kubectl, namespace: str, pod: str) -> str:
    """The node the pod runs (or ran) on: its spec, else its oomwatch Events."""
    obj = kubectl.get("pod", pod, "-n", namespace, not_found_ok=True)
    if obj is not None:
        node = obj.get("spec", {}).get("nodeName")
        if isinstance(node, str) and node:
            return node
        raise NotFound(f"pod {namespace}/{pod} is not scheduled on a node yet")
    selector = f"{FIELD_SELECTOR},involvedObject.name={pod}"
    events = kubectl.get("events", "-n", namespace, "--field-selector", selector) or {}
    nodes = reporting_nodes(events.get("items", []))
    if not nodes:
        raise NotFound(
            f"pod {namespace}/{pod} not found, and no oomwatch Event names its node: give --node"
        )
    return nodes[-1]


def reporting_nodes(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """The nodes whose agents wrote these Events (`reportingInstance: oomwatch-<node>`),
    oldest first."""
    found: list[tuple[str, str]] = []
    for item in items:
        instance = item.get("reportingInstance")
        if isinstance(instance, str) and instance.startswith("oomwatch-"):
            when = str(item.get("eventTime") or item.get("lastTimestamp") or "")
            found.append((when, instance.removeprefix("oomwatch-")))
    return [node for _, node in sorted(found)]


def agent_on(kubectl: Kubectl, node: str, namespace: str, selector: str) -> Agent:
    """The running agent pod of the DaemonSet on `node`."""
    reply = kubectl.get("pods", "-n", namespace, "-l", selector,
                        "--field-selector", f"spec.nodeName={node}") or {}  # fmt: skip
    pods = reply.get("items", [])
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    if not running:
        states = ", ".join(
            f"{p['metadata']['name']} {p.get('status', {}).get('phase')}" for p in pods
        )
        raise NotFound(
            f"no running oomwatch agent on node {node} (pods {selector} in namespace"
            f" {namespace}: {states or 'none'})"
        )
    newest = max(running, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
    return Agent(namespace, newest["metadata"]["name"], node)


def exec_args(agent: Agent, container: str, store: str, pod_ref: str,
              report_args: Sequence[str]) -> list[str]:  # fmt: skip
    """`exec` of `oomwatch report --store ... --pod ns/pod` in the agent container."""
    return [
        "exec", "-n", agent.namespace, agent.pod, "-c", container, "--",
        "oomwatch", "report", "--store", store, "--pod", pod_ref, *report_args,
    ]  # fmt: skip
