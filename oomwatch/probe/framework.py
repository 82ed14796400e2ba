"""The framework-OOM source: each CUDA/TensorFlow OOM a probe recorded, once, at a bounded rate.

Any pod that can write the probe directory can fill it with OOM events (45 files x 256 events
made 11,520 incidents, pushed a kernel kill out of the store and delayed the next one by
seconds: issue 14).  So events pass a token bucket per source and one for the node.  A source
is the vouched pod directory where per-pod directories are enforced, else the file's owner
uid; vouched sources have a node budget of their own, so no number of unvouched owners (100
uids drained a shared one: issue 22) starves a real trainer's directory.  An event a bucket
refuses is counted, summarised in one log line per poll, and tried again on the next poll
(it stays in its file), never marked seen.  Kernel kills do not pass through here.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path

from oomwatch.incident import Incident
from oomwatch.probe.join import CONTRADICTED, WarnOnce, claims_consistent, framework_incident
from oomwatch.probe.reader import ProbeDirReader, ReaderLimits, RecordSource

log = logging.getLogger("oomwatch.probe.framework")

SOURCE_BURST = 10  # framework OOMs one owner may report at once
SOURCE_EVERY_S = 60.0  # then one per minute
NODE_BURST = 60  # all vouched sources together
NODE_EVERY_S = 5.0
UNVOUCHED_BURST = 20  # all unvouched sources together (a budget apart from the vouched)
UNVOUCHED_EVERY_S = 15.0
SUMMARY_EVERY_S = 60.0  # the summary of waiting events, when nothing new was refused
MAX_SOURCES = 4096  # buckets kept (full, idle ones go first)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float


class RateLimit:
    """Token buckets: `burst` at once, then one per `every_s`, per key and for all keys."""

    def __init__(
        self,
        burst: int = SOURCE_BURST,
        every_s: float = SOURCE_EVERY_S,
        total_burst: int = NODE_BURST,
        total_every_s: float = NODE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._burst, self._every_s = burst, every_s
        self._clock = clock
        self._keys: dict[Hashable, _Bucket] = {}
        self._total = _Bucket(float(total_burst), clock())
        self._total_burst, self._total_every_s = total_burst, total_every_s
        self._unvouched = _Bucket(float(UNVOUCHED_BURST), clock())

    def allow(self, key: Hashable, vouched: bool = True) -> bool:
        """One event of `key`'s, drawn from the vouched or the unvouched node budget."""
        now = self._clock()
        bucket = self._keys.get(key)
        if bucket is None:
            if len(self._keys) >= MAX_SOURCES:
                self._forget_full(now)
            bucket = self._keys[key] = _Bucket(float(self._burst), now)
        _refill(bucket, now, self._burst, self._every_s)
        if vouched:
            node, burst, every_s = self._total, self._total_burst, self._total_every_s
        else:
            node, burst, every_s = self._unvouched, UNVOUCHED_BURST, UNVOUCHED_EVERY_S
        _refill(node, now, burst, every_s)
        if bucket.tokens < 1 or node.tokens < 1:
            return False
        bucket.tokens -= 1
        node.tokens -= 1
        return True

    def _forget_full(self, now: float) -> None:
        for key, bucket in list(self._keys.items()):
            _refill(bucket, now, self._burst, self._every_s)
            if bucket.tokens >= self._burst:
                del self._keys[key]
        while len(self._keys) >= MAX_SOURCES:  # all busy: the oldest entry goes
            del self._keys[next(iter(self._keys))]


def _refill(bucket: _Bucket, now: float, burst: int, every_s: float) -> None:
    bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at_s) / every_s)
    bucket.at_s = now


class FrameworkOomSource:
    """Reports each framework OOM recorded in the probe directory once (per daemon run).

    After a daemon restart the same events come again; the store drops them, since the
    incident's store key (boot, time, file, owner) is the same.  `pod_dirs`: the deployment
    enforces per-pod directories (oomwatch.probe.identity).
    """

    def __init__(
        self,
        probe_dir: Path,
        *,
        limits: ReaderLimits | None = None,
        reader: RecordSource | None = None,
        pod_dirs: bool = False,
        rate: RateLimit | None = None,
    ) -> None:
        self._reader = reader or ProbeDirReader(probe_dir, limits)
        self._pod_dirs = pod_dirs
        self._rate = rate or RateLimit()
        self._seen: set[tuple[str, int, float, int]] = set()
        self._waiting: set[tuple[str, int, float, int]] = set()  # refused, tried again
        self._warn = WarnOnce()
        self.suppressed = 0  # events refused at least once
        self._logged_at_s = 0.0

    def poll(self, now_wall_s: float | None = None) -> list[Incident]:
        now = time.time() if now_wall_s is None else now_wall_s
        out: list[Incident] = []
        present: set[tuple[str, int, float, int]] = set()
        waiting: set[tuple[str, int, float, int]] = set()
        suppressed: Counter[str] = Counter()
        for record in self._reader.read_all(now):
            if not record.events:
                continue
            if not claims_consistent(record):
                self._warn(record, CONTRADICTED)
                continue
            vouched = self._pod_dirs and record.pod_dir is not None
            source = f"pod_dir {record.pod_dir}" if vouched else f"uid {record.owner_uid}"
            for event in record.events:
                key = (record.name, record.meta.pid, record.meta.started_wall_s, event.seq)
                if key in self._seen:
                    present.add(key)
                elif self._rate.allow(source, vouched):
                    present.add(key)
                    out.append(framework_incident(record, event, now, self._pod_dirs))
                else:
                    waiting.add(key)
                    suppressed[source] += 1
        # Files gone or refused are forgotten (the sets stay bounded by what the reader
        # holds); a refused event stays unseen, to be recorded once its source has tokens.
        self._seen = present
        fresh = len(waiting - self._waiting)
        self.suppressed += fresh
        self._waiting = waiting
        if suppressed and (fresh or now - self._logged_at_s >= SUMMARY_EVERY_S):
            self._logged_at_s = now
            log.warning("framework_ooms_rate_limited", extra={
                "waiting": sum(suppressed.values()), "sources": len(suppressed),
                "by_source": dict(suppressed.most_common(5)),
                "consequence": "recorded when their source's budget allows",
            })  # fmt: skip
        return out

    def close(self) -> None:
        self._reader.close()
