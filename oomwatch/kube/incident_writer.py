"""Writes `OOMIncident` objects: API load proportional to problems, not to kills.

`offer` (on the Event publisher's worker, never on the kernel-log thread) only records the
latest object of a fingerprint in a pending map bounded in bytes; kills of a fingerprint
already pending add to its count and replace its evidence, so a storm of one workload's kills
is one pending write.  One thread writes, at most `rate_per_s` writes a second after a burst of
`burst` (a token bucket per node): create once, then merge-patch the count, the last-seen
time and the latest evidence.  On start and every `gc_interval_s` it lists its own node's
objects (label `oomwatch.io/node`), learns their counts (an agent restart continues them)
and deletes those not seen for `retention_s`; a namespace keeps at most `max_per_namespace`
of this node's objects (the least recently seen goes).  A cluster without the CRD, or an agent
without the grant, is told once in the log and the agent goes on without the objects.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from urllib3.exceptions import HTTPError

from oomwatch.incident import iso_epoch_s
from oomwatch.kube.oomincident import (
    FIELD_MANAGER,
    GROUP,
    NODE_LABEL,
    PLURAL,
    VERSION,
    Fingerprint,
    node_label_value,
    object_bytes,
)

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
RETENTION_S = 14 * 86400
UNAVAILABLE = frozenset({403, 404})  # no grant / no CRD: said once, then left alone


@dataclass(slots=True)
class _Pending:
    obj: dict[str, Any]  # the latest kill's object, `kills` still to add
    kills: int
    first_seen: str
    size_bytes: int


@dataclass(slots=True)
class _Known:
    namespace: str
    name: str
    kills: int
    first_seen: str
    last_seen_s: float


class IncidentWriter:
    """Bounded, coalescing, rate-limited writer of one node's `OOMIncident` objects."""

    def __init__(
        self,
        api: Any,  # kubernetes.client.CustomObjectsApi (called by method name: _call)
        node: str,
        *,
        rate_per_s: float = 1 / 30,
        burst: int = 3,
        max_pending_bytes: int = 1 << 20,
        retention_s: float = RETENTION_S,
        max_per_namespace: int = 50,
        gc_interval_s: float = 3600.0,
        request_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._api = api
        self._node = node
        self._rate_per_s = rate_per_s
        self._burst = float(burst)
        self._tokens = float(burst)
        self._tokens_at = clock()
        self._max_pending_bytes = max_pending_bytes
        self._retention_s = retention_s
        self._max_per_namespace = max_per_namespace
        self._gc_interval_s = gc_interval_s
        self._timeout = (min(5.0, request_timeout_s), request_timeout_s)
        self._clock = clock
        self._wall = wall
        self._cond = threading.Condition()
        self._pending: OrderedDict[Fingerprint, _Pending] = OrderedDict()
        self._pending_bytes = 0
        self._known: dict[Fingerprint, _Known] = {}
        self._next_gc_s = 0.0
        self._available = threading.Event()  # (its thread sets and clears, under _cond)
        self._available.set()
        self.writes = 0
        self.dropped = 0

    # --- the publisher's side -----------------------------------------------------------
    def offer(self, fingerprint: Fingerprint, obj: dict[str, Any], seen_at: str) -> None:
        """One more kill of `fingerprint`; `obj` is its object (oomincident.build_object).
        Never blocks on the API; a new fingerprint that would overflow the bound is dropped."""
        size = object_bytes(obj)
        with self._cond:
            if not self._available.is_set():
                return
            pending = self._pending.get(fingerprint)
            if pending is not None:
                self._pending_bytes += size - pending.size_bytes
                pending.obj, pending.size_bytes = obj, size
                pending.kills += 1
            elif self._pending_bytes + size > self._max_pending_bytes:
                self.dropped += 1
                return
            else:
                self._pending[fingerprint] = _Pending(obj, 1, seen_at, size)
                self._pending_bytes += size
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    @property
    def available(self) -> bool:
        """(Any thread) whether the API took the objects (no: no CRD, or no grant to write)."""
        return self._available.is_set()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # --- the writer thread -------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self._turn(stop)
            except Exception:  # a bug: say so, keep the thread
                log.exception("oomincident_writer_failed")
                stop.wait(1.0)

    def _turn(self, stop: threading.Event) -> None:
        now = self._clock()
        if now >= self._next_gc_s:
            self._next_gc_s = now + self._gc_interval_s
            self._collect()
            return
        with self._cond:
            if not self._pending or not self._available.is_set():
                self._cond.wait(timeout=0.5)
                return
        wait_s = self._take_token()
        if wait_s > 0:
            stop.wait(min(wait_s, 0.5))
            return
        with self._cond:
            if not self._pending:
                return
            fingerprint, pending = self._pending.popitem(last=False)
            self._pending_bytes -= pending.size_bytes
        try:
            self._write(fingerprint, pending)
        except _ApiError as exc:
            if exc.status in UNAVAILABLE:
                self._unavailable(exc)
                return
            with self._cond:  # back in front: written when the API answers
                if fingerprint in self._pending:
                    newer = self._pending.pop(fingerprint)
                    self._pending_bytes -= newer.size_bytes
                    newer.kills += pending.kills
                    newer.first_seen = pending.first_seen
                    pending = newer
                self._pending[fingerprint] = pending
                self._pending.move_to_end(fingerprint, last=False)
                self._pending_bytes += pending.size_bytes
            log.warning("oomincident_write_failed", extra={"status": exc.status})
            stop.wait(min(5.0, 1 / max(self._rate_per_s, 0.01)))

    def _take_token(self) -> float:
        """0 and one token spent, or the seconds until the next token."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._tokens_at) * self._rate_per_s)
        self._tokens_at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self._rate_per_s

    def _write(self, fp: Fingerprint, pending: _Pending) -> None:
        obj = pending.obj
        known = self._known.get(fp)
        if known is None:
            self._make_room(fp.namespace)
            obj = {**obj, "kills": pending.kills, "firstSeen": pending.first_seen}
            try:
                self._call("create_namespaced_custom_object", fp.namespace, body=obj)
            except _ApiError as exc:
                if exc.status != 409:
                    raise
                current = self._call(
                    "get_namespaced_custom_object", fp.namespace, name=obj["metadata"]["name"]
                )
                known = self._remember(fp, current)
            else:
                self._remember(fp, obj)
                return
        kills = known.kills + pending.kills
        patch = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
        patch.update(kills=kills, firstSeen=known.first_seen)
        patch["metadata"] = {"labels": obj["metadata"]["labels"]}
        try:
            self._call(
                "patch_namespaced_custom_object",
                fp.namespace,
                name=known.name,
                body=patch,
                _content_type=MERGE_PATCH,
            )
        except _ApiError as exc:
            if exc.status != 404:
                raise
            del self._known[fp]  # deleted meanwhile: create it again, counting from here
            return self._write(fp, pending)
        known.kills = kills
        known.last_seen_s = iso_epoch_s(str(obj.get("lastSeen"))) or self._wall()
        return None

    def _remember(self, fp: Fingerprint, obj: Any) -> _Known:
        meta = obj.get("metadata", {}) if isinstance(obj, dict) else {}
        kills = obj.get("kills") if isinstance(obj, dict) else None
        known = _Known(
            namespace=fp.namespace,
            name=str(meta.get("name")),
            kills=kills if isinstance(kills, int) and kills > 0 else 1,
            first_seen=str(obj.get("firstSeen") or ""),
            last_seen_s=iso_epoch_s(str(obj.get("lastSeen") or "")) or self._wall(),
        )
        self._known[fp] = known
        return known

    def _make_room(self, namespace: str) -> None:
        """Delete this node's least recently seen objects of `namespace` down to the cap."""
        mine = sorted(
            ((k.last_seen_s, fp) for fp, k in self._known.items() if k.namespace == namespace),
            key=lambda pair: pair[0],
        )
        while len(mine) >= self._max_per_namespace:
            _, fp = mine.pop(0)
            self._delete(fp)

    def _delete(self, fp: Fingerprint) -> None:
        known = self._known.pop(fp)
        try:
            self._call("delete_namespaced_custom_object", known.namespace, name=known.name)
        except _ApiError as exc:
            if exc.status != 404:
                raise

    def _collect(self) -> None:
        """List this node's objects: learn their counts, delete the expired."""
        try:
            reply = self._call(
                "list_cluster_custom_object",
                None,
                label_selector=f"{NODE_LABEL}={node_label_value(self._node)}",
                resource_version="0",  # from the API server's cache, not a quorum read of etcd
            )
        except _ApiError as exc:
            if exc.status in UNAVAILABLE:
                self._unavailable(exc)
            else:
                log.warning("oomincident_list_failed", extra={"status": exc.status})
                self._next_gc_s = self._clock() + 30.0
            return
        items = reply.get("items", []) if isinstance(reply, dict) else []
        cutoff_s = self._wall() - self._retention_s
        for item in items:
            if not isinstance(item, dict) or item.get("node") != self._node:
                continue
            fp = Fingerprint(
                namespace=str(item.get("metadata", {}).get("namespace") or ""),
                workload=str(item.get("workload") or ""),
                container=str(item.get("container") or ""),
                verdict_code=str(item.get("verdictCode") or ""),
                node=self._node,
            )
            known = self._remember(fp, item)
            if known.last_seen_s < cutoff_s:
                try:
                    self._delete(fp)
                except _ApiError as exc:
                    log.warning("oomincident_gc_failed", extra={"status": exc.status})
        with self._cond:
            self._available.set()  # again, if the CRD or the grant came since

    def _unavailable(self, exc: _ApiError) -> None:
        with self._cond:
            if self._available.is_set():
                log.warning(
                    "oomincidents_unavailable",
                    extra={
                        "status": exc.status,
                        "why": "the OOMIncident CRD is not installed"
                        if exc.status == 404
                        else "the agent may not write oomincidents (RBAC)",
                        "effect": "no OOMIncident objects; Events, metrics and the store go on",
                    },
                )
            self._available.clear()
            self._pending.clear()
            self._pending_bytes = 0

    def _call(self, method: str, namespace: str | None, **kw: Any) -> Any:
        args: list[Any] = [GROUP, VERSION]
        if namespace is not None:
            args.append(namespace)
        args.append(PLURAL)
        if "name" in kw:
            args.append(kw.pop("name"))
        if "body" in kw:
            args.append(kw.pop("body"))
        if method.startswith(("create", "patch")):
            kw["field_manager"] = FIELD_MANAGER
        if not method.startswith(("list", "get")):
            self.writes += 1
        try:
            return getattr(self._api, method)(*args, _request_timeout=self._timeout, **kw)
        except Exception as exc:
            status = getattr(exc, "status", None)
            if not isinstance(status, int) and not isinstance(exc, OSError | HTTPError):
                raise  # a bug, not the API: run() logs it
            raise _ApiError(status if isinstance(status, int) else 0) from exc


class _ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


__all__ = ["IncidentWriter"]
