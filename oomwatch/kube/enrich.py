"""Incident -> pod context: namespace, pod, container, owner, QoS, requests and limits."""

from __future__ import annotations

from oomwatch.incident import Incident, PodContext
from oomwatch.kube.cache import PodCache
from oomwatch.kube.pods import ContainerInfo, PodInfo


def pod_context(pod: PodInfo, container: ContainerInfo | None) -> PodContext:
    """The `PodContext` for a pod and (when known) the container the kill happened in."""
    last = container.last_terminated if container else None
    return PodContext(
        namespace=pod.namespace,
        pod=pod.name,
        container=container.name if container else None,
        node=pod.node,
        owner_kind=pod.owner_kind,
        owner_name=pod.owner_name,
        qos_class=pod.qos_class,
        container_memory_request_bytes=container.memory_request_bytes if container else None,
        container_memory_limit_bytes=container.memory_limit_bytes if container else None,
        pod_memory_request_bytes=pod.pod_memory_request_bytes,
        pod_memory_limit_bytes=pod.pod_memory_limit_bytes,
        restart_count=container.restart_count if container else None,
        last_termination_reason=last.reason if last else None,
        last_termination_exit_code=last.exit_code if last else None,
    )


class PodEnricher:
    """Enricher over the pod cache; asks for a retry while the pod or container is unseen.

    A kill often lands before the watch delivers the pod (or the restarted container's
    status), so "not found" means "not yet"; the pipeline's bounded wait ends the retries.
    A framework OOM's claimed pod is taken only where the API backs it (`vouch_claims`).
    """

    def __init__(self, cache: PodCache) -> None:
        self._cache = cache

    def enrich(self, incident: Incident) -> bool:
        if incident.kind == "framework" and not vouch_claims(incident, self._cache):
            return False
        if incident.pod_uid is None:
            self._name_candidates(incident)
            return True  # not a pod's cgroup (global OOM, system service): nothing to add
        pod = self._cache.get(incident.pod_uid)
        if pod is None:
            return False
        container = pod.container_by_id(incident.container_id) if incident.container_id else None
        incident.k8s = pod_context(pod, container)
        return incident.container_id is None or container is not None

    def _name_candidates(self, incident: Incident) -> None:
        """An ambiguous kill charges no pod, but its report names the pods it may be in."""
        if incident.attribution is None:
            return
        for candidate in incident.attribution.candidates:
            pod = self._cache.get(candidate.pod_uid) if candidate.pod_uid else None
            if pod is not None:
                candidate.namespace, candidate.pod = pod.namespace, pod.name


def vouch_claims(incident: Incident, cache: PodCache) -> bool:
    """Give a framework OOM the pod and container its probe file claims, where the API backs
    the claim (oomwatch.probe.identity); False while the claimed pod is not in the cache yet.

    Only a per-pod directory vouches (oomwatch.probe.identity): the pod is then known and
    only its container is looked up by the claimed name (a pod can only name its own).  A
    claim from anywhere else stays unverified: no pod identity, no Event, no labels.
    """
    alloc = incident.allocator or {}
    claims = alloc.get("claimed") or {}
    uid = incident.pod_uid
    if incident.container_id is not None or uid is None:
        return True
    pod = cache.get(uid)
    if pod is None:
        return False  # not yet (or never: the pipeline's bounded wait ends the retries)
    name = claims.get("container")
    container = pod.container_by_name(name) if isinstance(name, str) else None
    incident.container_id = container.container_id if container is not None else None
    return True
