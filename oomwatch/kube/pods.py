"""What oomwatch keeps of a pod, decoded from the API's JSON (pure; no client objects).

The pod cache stores these instead of the client's models: they hold only what enrichment,
Events and the false-OOMKilled check need, and decoding a dict is testable without a server.
A malformed field decodes to None instead of failing the whole pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oomwatch.kube.quantity import quantity_bytes_or_none

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
"""On a static pod's mirror, the kubelet-internal UID that names its cgroup."""


@dataclass(frozen=True, slots=True)
class Termination:
    """A container's `terminated` state (current or last)."""

    reason: str | None
    exit_code: int | None
    signal: int | None
    started_at: str | None
    finished_at: str | None
    container_id: str | None


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    """One container of a pod: spec resources joined with its status."""

    name: str
    role: str  # "app" | "init" | "ephemeral"
    container_id: str | None
    memory_request_bytes: int | None
    memory_limit_bytes: int | None
    restart_count: int | None
    terminated: Termination | None
    last_terminated: Termination | None

    def has_id(self, container_id: str) -> bool:
        """True for the running container or the one it replaced (killed ones restart)."""
        ids = (
            self.container_id,
            self.last_terminated.container_id if self.last_terminated else None,
            self.terminated.container_id if self.terminated else None,
        )
        return container_id in ids


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod as the cache keeps it, keyed by `uid` (and `config_hash` for static pods)."""

    uid: str
    namespace: str
    name: str
    node: str | None
    qos_class: str | None
    owner_kind: str | None
    owner_name: str | None
    config_hash: str | None
    phase: str | None
    status_reason: str | None
    status_message: str | None
    resource_version: str | None
    containers: tuple[ContainerInfo, ...]
    pod_memory_request_bytes: int | None
    pod_memory_limit_bytes: int | None

    @property
    def cgroup_uid(self) -> str:
        """The UID in the pod's cgroup name: the config hash for static pods."""
        return self.config_hash or self.uid

    def container_by_id(self, container_id: str) -> ContainerInfo | None:
        return next((c for c in self.containers if c.has_id(container_id)), None)

    def container_by_name(self, name: str) -> ContainerInfo | None:
        return next((c for c in self.containers if c.name == name), None)


class PodDecodeError(ValueError):
    """A pod object without the identity fields (uid, namespace, name)."""


def strip_runtime_prefix(container_id: str | None) -> str | None:
    """`containerd://abc` -> `abc` (the cgroup name carries only the bare ID)."""
    if not container_id:
        return None
    _, sep, bare = container_id.partition("://")
    return bare if sep else container_id


def decode_pod(obj: Mapping[str, Any]) -> PodInfo:
    """Decode one pod object as the API serves it (camelCase JSON)."""
    meta = _map(obj.get("metadata"))
    spec = _map(obj.get("spec"))
    status = _map(obj.get("status"))
    uid, namespace = _str(meta.get("uid")), _str(meta.get("namespace"))
    name = _str(meta.get("name"))
    if not (uid and namespace and name):
        raise PodDecodeError("pod object without metadata.uid/namespace/name")
    owner_kind, owner_name = _owner(meta)
    containers = (
        _containers(spec.get("initContainers"), status.get("initContainerStatuses"), "init")
        + _containers(spec.get("containers"), status.get("containerStatuses"), "app")
        + _containers(
            spec.get("ephemeralContainers"), status.get("ephemeralContainerStatuses"), "ephemeral"
        )
    )
    request, limit = _pod_memory(spec, containers)
    qos = _str(status.get("qosClass"))
    return PodInfo(
        uid=uid,
        namespace=namespace,
        name=name,
        node=_str(spec.get("nodeName")),
        qos_class=qos.lower() if qos else None,
        owner_kind=owner_kind,
        owner_name=owner_name,
        config_hash=_str(_map(meta.get("annotations")).get(MIRROR_ANNOTATION)),
        phase=_str(status.get("phase")),
        status_reason=_str(status.get("reason")),
        status_message=_str(status.get("message")),
        resource_version=_str(meta.get("resourceVersion")),
        containers=containers,
        pod_memory_request_bytes=request,
        pod_memory_limit_bytes=limit,
    )


def _owner(meta: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The controlling owner; a ReplicaSet named `<deploy>-<pod-template-hash>` -> Deployment.

    The pure naming rule avoids a ReplicaSet lookup (one more RBAC grant): the Deployment
    controller names each ReplicaSet after the pod-template-hash label it puts on the pods.
    """
    refs = [_map(r) for r in _list(meta.get("ownerReferences"))]
    ref = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if ref is None:
        return None, None
    kind, name = _str(ref.get("kind")), _str(ref.get("name"))
    template_hash = _str(_map(meta.get("labels")).get("pod-template-hash"))
    suffix = f"-{template_hash}" if template_hash else None
    if kind == "ReplicaSet" and name and suffix and name.endswith(suffix) and name != suffix:
        return "Deployment", name[: -len(suffix)]
    return kind, name


def _containers(specs: object, statuses: object, role: str) -> tuple[ContainerInfo, ...]:
    by_name = {_str(_map(s).get("name")): _map(s) for s in _list(statuses)}
    out: list[ContainerInfo] = []
    for raw in _list(specs):
        spec = _map(raw)
        name = _str(spec.get("name"))
        if not name:
            continue
        resources = _map(spec.get("resources"))
        st = by_name.get(name, {})
        restart = st.get("restartCount")
        out.append(
            ContainerInfo(
                name=name,
                role=role,
                container_id=strip_runtime_prefix(_str(st.get("containerID"))),
                memory_request_bytes=quantity_bytes_or_none(
                    _map(resources.get("requests")).get("memory")
                ),
                memory_limit_bytes=quantity_bytes_or_none(
                    _map(resources.get("limits")).get("memory")
                ),
                restart_count=restart if isinstance(restart, int) else None,
                terminated=_termination(_map(st.get("state")).get("terminated")),
                last_terminated=_termination(_map(st.get("lastState")).get("terminated")),
            )
        )
    return tuple(out)


def _termination(raw: object) -> Termination | None:
    if not isinstance(raw, Mapping):
        return None
    exit_code, signal = raw.get("exitCode"), raw.get("signal")
    return Termination(
        reason=_str(raw.get("reason")),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        signal=signal if isinstance(signal, int) else None,
        started_at=_str(raw.get("startedAt")),
        finished_at=_str(raw.get("finishedAt")),
        container_id=strip_runtime_prefix(_str(raw.get("containerID"))),
    )


def _pod_memory(
    spec: Mapping[str, Any], containers: tuple[ContainerInfo, ...]
) -> tuple[int | None, int | None]:
    """Pod-level memory: `spec.resources` (1.32+) if set, else the app containers' sums.

    The pod limit exists only when every app container has one (else the pod cgroup is
    bounded by the node); an init container's larger value raises the effective figure.
    """
    pod_resources = _map(spec.get("resources"))
    pod_request = quantity_bytes_or_none(_map(pod_resources.get("requests")).get("memory"))
    pod_limit = quantity_bytes_or_none(_map(pod_resources.get("limits")).get("memory"))
    apps = [c for c in containers if c.role == "app"]
    inits = [c for c in containers if c.role == "init"]
    if pod_request is None:
        requests = [c.memory_request_bytes for c in apps if c.memory_request_bytes is not None]
        init_requests = [c.memory_request_bytes or 0 for c in inits]
        if requests or any(init_requests):
            pod_request = max([sum(requests), *init_requests])
    if pod_limit is None and apps and all(c.memory_limit_bytes is not None for c in apps):
        total = sum(c.memory_limit_bytes or 0 for c in apps)
        init_limits = [c.memory_limit_bytes for c in inits]
        if all(v is not None for v in init_limits):
            pod_limit = max([total, *(v or 0 for v in init_limits)])
    return pod_request, pod_limit


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
