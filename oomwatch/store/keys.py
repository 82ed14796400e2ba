"""How the store tells one recorded kill from another: its unique key (a replay of the same
kernel record after a restart finds the same key and is not stored twice)."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import replace

from oomwatch.incident import Incident


def store_key(incident: Incident) -> str:
    """`identity_key()`, adjusted for the incidents the kernel log does not fully name.

    - A counter-only kill (`kmsg_missing`) has no kernel time or victim, so two in one
      cgroup would share a key; each is observed once (never replayed): a fresh key.
    - A header-suppressed kill gets its cgroup from the counters, which a replay after a
      restart may not repeat, so its key leaves the cgroup out (time + pid stay unique).
    - A framework OOM is one event of one writing process: its pid namespace, pid, start
      time and the event's sequence number, the file's owner and the vouched pod go in the
      key; the file's name does not (a restarted container renames the previous run's file).
    - An incident from the pod status (eviction, false OOMKilled) has neither kernel time
      nor victim: pod, container and its time tell two of them apart.
    """
    if incident.kmsg_missing:
        return f"{incident.identity_key()}-{uuid.uuid4().hex[:12]}"
    if incident.kind == "framework":  # its time alone could be forged
        alloc = incident.allocator or {}
        writer = (alloc.get(k) for k in ("pid_ns", "pid", "process_started_mono_s", "event_seq"))
        return _digest(
            incident.identity_key(),
            *map(str, writer),
            str(alloc.get("owner_uid")),
            incident.pod_uid or "",
        )
    if incident.header_suppressed:
        return replace(incident, task_memcg=None, oom_memcg=None).identity_key()
    if incident.kernel_time_s is None and not incident.victims:
        return _digest(
            incident.identity_key(),
            incident.pod_uid or "",
            incident.container_id or "",
            incident.wall_time or incident.detected_at or "",
        )
    return incident.identity_key()


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]
