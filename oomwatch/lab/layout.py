"""Kubelet-like memcg trees inside a scratch memcg, named exactly as kubelet and runtimes do.

The names follow `pkg/kubelet/cm/cgroup_manager_linux.go` and the runtimes' conventions
(see the table in shared/notes/reference.md), so the kernel prints the same paths it prints
on a real node, just below the scratch prefix.
"""

from __future__ import annotations

from typing import Literal

from oomwatch.lab.memcg import Memcg, ScratchMemcg

Qos = Literal["burstable", "besteffort", "guaranteed"]
Driver = Literal["cgroupfs", "systemd"]
LabRuntime = Literal["containerd", "cri-o", "docker"]

_SCOPE_PREFIX: dict[str, str] = {
    "containerd": "cri-containerd-",
    "cri-o": "crio-",
    "docker": "docker-",
}


def _cgroupfs_names(pod_uid: str, container_id: str, qos: Qos, runtime: LabRuntime) -> list[str]:
    qos_dirs = [] if qos == "guaranteed" else [qos]
    container = f"crio-{container_id}" if runtime == "cri-o" else container_id
    return ["kubepods", *qos_dirs, f"pod{pod_uid}", container]


def _systemd_names(pod_uid: str, container_id: str, qos: Qos, runtime: LabRuntime) -> list[str]:
    uid = pod_uid.replace("-", "_")
    names = ["kubepods.slice"]
    if qos == "guaranteed":
        names.append(f"kubepods-pod{uid}.slice")
    else:
        names += [f"kubepods-{qos}.slice", f"kubepods-{qos}-pod{uid}.slice"]
    names.append(f"{_SCOPE_PREFIX[runtime]}{container_id}.scope")
    return names


def kubelet_layout(
    scratch: ScratchMemcg,
    pod_uid: str,
    container_id: str,
    qos: Qos = "burstable",
    driver: Driver = "cgroupfs",
    runtime: LabRuntime = "containerd",
    pod_limit_bytes: int | None = None,
    container_limit_bytes: int | None = None,
) -> Memcg:
    """Build kubepods/<qos>/pod<uid>/<container> (or the systemd names); return the container.

    The pod memcg is the container's parent (`memcg.relpath.rsplit('/', 1)[0]`).
    """
    if qos not in ("burstable", "besteffort", "guaranteed"):
        raise ValueError(f"unknown QoS class {qos!r}")
    if runtime not in _SCOPE_PREFIX:
        raise ValueError(f"unknown runtime {runtime!r}")
    if driver == "cgroupfs":
        names = _cgroupfs_names(pod_uid, container_id, qos, runtime)
    elif driver == "systemd":
        names = _systemd_names(pod_uid, container_id, qos, runtime)
    else:
        raise ValueError(f"unknown cgroup driver {driver!r}")
    node: Memcg = scratch
    for name in names[:-2]:
        node = node.create_child(name)
    pod = node.create_child(names[-2], pod_limit_bytes)
    return pod.create_child(names[-1], container_limit_bytes)
