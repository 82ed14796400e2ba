"""Which of a probe file's identity claims something other than the file itself backs.

A flight record names the pod, namespace, container and memcg that wrote it, and any pod that
can write the probe directory can write any of that.  A framework OOM's claim is believed only
when something the writer cannot choose backs it: the file lies in a per-pod directory
named by a pod UID, and the deployment makes every pod mount only its own
(`--probe-pod-dirs`: the kubelet resolves `subPathExpr: $(POD_UID)` from `metadata.uid`, and
the shipped admission policy, daemonset/probe-mount-policy.yaml, admits no other mount of
the directory; daemonset/README.md, threat model).

The file's owner vouches for nothing: any pod may run as the uid another pod's
container runs as (the shipped training example runs as 1000), and a root pod may chown.

An incident from an unvouched file keeps the claims as escaped text (`allocator.claimed`) for
the post-mortem and carries no pod identity: no Event, no annotation, no pod labels.
"""

from __future__ import annotations

from oomwatch.probe.schema import ProbeMeta
from oomwatch.sanitize import escape_control

UNVERIFIED = "unverified"
BY_POD_DIR = "pod_dir"


def claimed(meta: ProbeMeta) -> dict[str, str | None]:
    """What the file says about who wrote it, escaped (text for people, never identity)."""
    values = {
        "pod_uid": meta.pod_uid,
        "namespace": meta.namespace,
        "pod": meta.pod_name,
        "container": meta.container,
        "cgroup": meta.cgroup,
    }
    return {k: None if v is None else escape_control(v) for k, v in values.items()}


def dir_vouched_uid(pod_dir: str | None, meta: ProbeMeta, pod_dirs_enforced: bool) -> str | None:
    """The pod UID a per-pod directory vouches for (None if none, or the file says otherwise)."""
    if not pod_dirs_enforced or pod_dir is None:
        return None
    if meta.pod_uid is not None and meta.pod_uid != pod_dir:
        return None  # a contradiction is no evidence either way
    return pod_dir
