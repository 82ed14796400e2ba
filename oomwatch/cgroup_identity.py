"""Map a memcg path, as the kernel prints it, to the Kubernetes identity behind it.

Kubelet names cgroups by a fixed scheme (`pkg/kubelet/cm/cgroup_manager_linux.go`):
`kubepods[/qos]/pod<uid>/<container>` with the cgroupfs driver, or the systemd slice/scope names
(`kubepods-burstable-pod<uid with - as _>.slice/cri-containerd-<id>.scope`).  This is the only
link between a kernel OOM report and a pod, so it is a pure function, anchored on those fixed
names: a component that does not fit the scheme is never guessed into a pod or a container.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from oomwatch.dataclass_dict import replaced
from oomwatch.incident import CgroupDriver, Incident, LimitScope, QosClass, Runtime

Level = Literal["container", "pod", "qos", "node", "cgroup"]

_KUBEPODS = {"kubepods": "cgroupfs", "kubepods.slice": "systemd"}
_QOS_DIRS: dict[str, QosClass] = {"burstable": "burstable", "besteffort": "besteffort"}
_QOS_SLICES: dict[str, QosClass] = {
    "kubepods-burstable.slice": "burstable",
    "kubepods-besteffort.slice": "besteffort",
}
# Pod UIDs are UUIDs, static pods use a config hash; either way letters, digits and dashes
# (systemd turns the dashes into underscores).
_UID = r"[0-9A-Za-z][0-9A-Za-z_-]{0,63}"
_POD_DIR = re.compile(rf"pod(?P<uid>{_UID})")
_POD_SLICE = re.compile(rf"kubepods-(?:(?P<qos>burstable|besteffort)-)?pod(?P<uid>{_UID})\.slice")
_ID = r"[0-9A-Za-z][0-9A-Za-z_.-]{0,127}"
_HEX_ID = re.compile(r"[0-9a-f]{64}")
# (pattern on one path component, runtime); the first that matches wins.
_CONTAINER_FORMS: tuple[tuple[re.Pattern[str], Runtime | None], ...] = (
    (re.compile(rf"cri-containerd-(?P<id>{_ID})\.scope"), "containerd"),
    (re.compile(rf"crio-conmon-(?P<id>{_ID}?)(?:\.scope)?"), "cri-o"),
    (re.compile(rf"crio-(?P<id>{_ID}?)(?:\.scope)?"), "cri-o"),
    (re.compile(rf"docker-(?P<id>{_ID}?)\.scope"), "docker"),
    (re.compile(r"(?P<id>[0-9a-f]{64})"), "containerd"),  # cgroupfs driver: the bare id
    (re.compile(rf"(?P<id>{_ID})"), None),
)
# The systemd spec as a directory name (k3s/k0s, `_colon_form`).
_COLON_RUNTIMES: dict[str, Runtime] = {
    "cri-containerd": "containerd",
    "crio": "cri-o",
    "docker": "docker",
}
_COLON_FORM = re.compile(
    rf"kubepods-(?:(?P<qos>burstable|besteffort)-)?pod(?P<uid>{_UID})\.slice"
    rf":(?P<runtime>cri-containerd|crio|docker):(?P<id>[0-9a-f]{{1,128}})"
)
# Docker outside Kubernetes: `/docker/<id>` (cgroupfs) or `docker-<id>.scope` (systemd).
_DOCKER_PLAIN = re.compile(r"(?:^|/)docker/(?P<id>[0-9a-f]{64})(?:/|$)")
_DOCKER_SCOPE = re.compile(r"(?:^|/)docker-(?P<id>[0-9a-f]{64})\.scope(?:/|$)")


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """Who owns a memcg; `None` where the path does not say."""

    pod_uid: str | None = None
    container_id: str | None = None
    qos_class: QosClass | None = None
    driver: CgroupDriver | None = None
    runtime: Runtime | None = None
    level: Level = "cgroup"


NOT_KUBERNETES = CgroupIdentity()


def identify(cgroup_path: str) -> CgroupIdentity:
    """The Kubernetes identity of a memcg path as the kernel prints it (`task_memcg=` etc.).

    `kubepods` may sit below a prefix (nested LXC, a test's scratch root).  Anything below a
    container (crun's `container` child, a process's own sub-cgroup) still belongs to it.
    """
    parts = [p for p in cgroup_path.strip().split("/") if p]
    root = next((i for i, p in enumerate(parts) if p in _KUBEPODS), None)
    if root is None:
        colon = _colon_form(parts[-1]) if parts else None
        return colon if colon is not None else _outside_kubernetes(cgroup_path)
    driver: CgroupDriver = "systemd" if _KUBEPODS[parts[root]] == "systemd" else "cgroupfs"
    rest = parts[root + 1 :]
    if not rest:
        return CgroupIdentity(driver=driver, level="node")
    qos_names = _QOS_SLICES if driver == "systemd" else _QOS_DIRS
    qos = qos_names.get(rest[0])
    if qos is not None:
        rest = rest[1:]
        if not rest:
            return CgroupIdentity(qos_class=qos, driver=driver, level="qos")
    pod_uid = _pod_uid(rest[0], driver, qos)
    if pod_uid is None:
        return CgroupIdentity(driver=driver, level="cgroup")
    qos_class: QosClass = qos or "guaranteed"
    if len(rest) == 1:
        return CgroupIdentity(pod_uid=pod_uid, qos_class=qos_class, driver=driver, level="pod")
    container_id, runtime = _container(rest[1])
    return CgroupIdentity(pod_uid, container_id, qos_class, driver, runtime, "container")


def _colon_form(component: str) -> CgroupIdentity | None:
    """k3s/k0s with the systemd driver but cgroupfs underneath (runc's fallback) name the
    container's cgroup directory by the systemd spec itself:
    `kubepods-burstable-pod<uid>.slice:cri-containerd:<id>` (under containerd.service)."""
    m = _COLON_FORM.fullmatch(component)
    if m is None:
        return None
    qos = _QOS_DIRS.get(m.group("qos") or "", "guaranteed")
    runtime: Runtime = _COLON_RUNTIMES[m.group("runtime")]
    uid = m.group("uid").replace("_", "-")
    return CgroupIdentity(uid, m.group("id"), qos, "systemd", runtime, "container")


def _pod_uid(component: str, driver: CgroupDriver, qos: QosClass | None) -> str | None:
    if driver == "cgroupfs":
        m = _POD_DIR.fullmatch(component)
        return m.group("uid") if m else None
    m = _POD_SLICE.fullmatch(component)
    if m is None or m.group("qos") != qos:  # the pod slice repeats its parent's QoS
        return None
    return m.group("uid").replace("_", "-")


def _container(component: str) -> tuple[str | None, Runtime | None]:
    if "..." in component or "\u2026" in component:
        return None, None  # abridged by whoever pasted it: an id cut short is no id
    for pattern, runtime in _CONTAINER_FORMS:
        m = pattern.fullmatch(component)
        if m:
            return m.group("id"), runtime
    return None, None


def _outside_kubernetes(cgroup_path: str) -> CgroupIdentity:
    """Plain docker containers still get their id and runtime; the level stays `cgroup`."""
    m = _DOCKER_PLAIN.search(cgroup_path) or _DOCKER_SCOPE.search(cgroup_path)
    if m is None:
        return NOT_KUBERNETES
    driver: CgroupDriver = "systemd" if m.re is _DOCKER_SCOPE else "cgroupfs"
    return CgroupIdentity(container_id=m.group("id"), driver=driver, runtime="docker")


def limit_scope(incident: Incident) -> LimitScope | None:
    """Which limit the kernel enforced: the level of the OOMing memcg, or `global`."""
    if incident.kind == "global":
        return "global"
    if incident.kind != "memcg" or not incident.oom_memcg:
        return None
    return identify(incident.oom_memcg).level


def annotate(incident: Incident) -> Incident:
    """Fill the identity fields from the victim's memcg (the group's or OOMing one as fallback).

    A field the path does not determine keeps what an earlier stage set.
    """
    path = incident.task_memcg or incident.group_cgroup or incident.oom_memcg
    ident = identify(path) if path else NOT_KUBERNETES
    if incident.attribution is not None:
        for candidate in incident.attribution.candidates:
            found = identify(candidate.cgroup)
            candidate.pod_uid = candidate.pod_uid or found.pod_uid
            candidate.container_id = candidate.container_id or found.container_id
    if incident.kind == "memcg" and path and incident.oom_memcg == path:
        scope: LimitScope | None = ident.level  # `limit_scope` without a second `identify`
    else:
        scope = limit_scope(incident)
    return replaced(
        incident,
        pod_uid=ident.pod_uid or incident.pod_uid,
        container_id=ident.container_id or incident.container_id,
        qos_class=ident.qos_class or incident.qos_class,
        cgroup_driver=ident.driver or incident.cgroup_driver,
        runtime=ident.runtime or incident.runtime,
        limit_scope=scope or incident.limit_scope,
    )


def container_cgroup(relpath: str) -> str:
    """The container's own cgroup for a path at or below it (e.g. crun's `container` child)."""
    path = relpath.rstrip("/")
    while "/" in path.strip("/"):
        parent = path.rsplit("/", 1)[0]
        if identify(parent).level != "container":
            break
        path = parent
    return path
