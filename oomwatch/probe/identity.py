"""Which of a probe file's identity claims something other than the file itself backs.

A flight record names the pod, namespace, container and memcg that wrote it, and any pod that
can write the probe directory can write any of that.  A framework OOM's claim is believed only
when something the writer cannot choose backs it (issue 14):

- `pod_dir`: the file lies in a per-pod directory named by a pod UID, and the deployment makes
  every pod mount only its own (`--probe-pod-dirs`: the kubelet resolves `subPathExpr:
  $(POD_UID)` from `metadata.uid`, and an admission policy of the cluster's admits no other
  mount of the directory; daemonset/README.md, threat model);
- `owner_uid`: the API says the claimed container runs as a fixed non-root uid, and the file's
  owner is that uid.  The kernel sets the owner; only a pod with CAP_CHOWN can give a file
  another, and root (uid 0) owns what every root pod writes, so it vouches for no one.

An incident from an unvouched file keeps the claims as escaped text (`allocator.claimed`) for
the post-mortem and carries no pod identity: no Event, no annotation, no pod labels.
"""

from __future__ import annotations

from typing import Any

from oomwatch.probe.schema import ProbeMeta
from oomwatch.sanitize import escape_control

UNVERIFIED = "unverified"
BY_POD_DIR = "pod_dir"
BY_OWNER = "owner_uid"


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


def owner_vouches(owner_uid: Any, run_as_user: int | None) -> bool:
    """Whether a file's owner proves it was written by a container running as `run_as_user`."""
    return (
        isinstance(owner_uid, int)
        and run_as_user is not None
        and owner_uid == run_as_user
        and owner_uid != 0
    )
