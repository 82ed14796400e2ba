"""The node's pods, by the UID the cgroup path carries; deleted pods linger for late kills.

A pod killed for memory is often deleted (Job cleanup, eviction) before its incident is
enriched, so deletions are kept as tombstones for `keep_deleted_s` instead of dropped.
Static pods are found by their mirror annotation (the config hash names their cgroup).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from oomwatch.kube.pods import PodInfo


class PodCache:
    """Thread-safe map of pod UID (and static-pod config hash) -> latest `PodInfo`."""

    def __init__(
        self, keep_deleted_s: float = 900.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, PodInfo] = {}  # by API uid
        self._deleted: dict[str, tuple[PodInfo, float]] = {}  # by API uid -> (pod, deleted at)
        self._keep_deleted_s = keep_deleted_s
        self._clock = clock
        self._synced = threading.Event()  # set by the first list, on the watcher's thread

    @property
    def synced(self) -> bool:
        """(Any thread) whether the pods have been listed once."""
        return self._synced.is_set()

    def replace(self, pods: Iterable[PodInfo]) -> dict[str, PodInfo]:
        """Install a fresh list; pods missing from it become tombstones.  Returns the old map."""
        fresh = {p.uid: p for p in pods}
        now = self._clock()
        with self._lock:
            old = self._pods
            for uid, pod in old.items():
                if uid not in fresh:
                    self._deleted[uid] = (pod, now)
            for uid in fresh:
                self._deleted.pop(uid, None)
            self._pods = fresh
            self._synced.set()
            self._prune(now)
        return old

    def upsert(self, pod: PodInfo) -> PodInfo | None:
        """Store an ADDED/MODIFIED pod; returns the previous version, if any."""
        with self._lock:
            previous = self._pods.get(pod.uid)
            self._pods[pod.uid] = pod
            self._deleted.pop(pod.uid, None)
            return previous

    def delete(self, pod: PodInfo) -> None:
        now = self._clock()
        with self._lock:
            self._pods.pop(pod.uid, None)
            self._deleted[pod.uid] = (pod, now)
            self._prune(now)

    def get(self, cgroup_uid: str) -> PodInfo | None:
        """The pod whose cgroup carries `cgroup_uid` (API uid or static-pod config hash)."""
        key = cgroup_uid.replace("_", "-")  # the systemd driver writes `_` for `-`
        with self._lock:
            pod = self._pods.get(key)
            if pod is not None:
                return pod
            for candidate in self._pods.values():
                if candidate.config_hash == key:
                    return candidate
            tomb = self._deleted.get(key)
            if tomb is not None:
                return tomb[0]
            return next((p for p, _ in self._deleted.values() if p.config_hash == key), None)

    def pods(self) -> list[PodInfo]:
        with self._lock:
            return list(self._pods.values())

    def _prune(self, now: float) -> None:
        cutoff = now - self._keep_deleted_s
        for uid in [u for u, (_, at) in self._deleted.items() if at < cutoff]:
            del self._deleted[uid]
