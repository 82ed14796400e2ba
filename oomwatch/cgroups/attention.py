"""Which containers the sampler reads every second, and which far less often.

Most containers of a node sit far below their limit, and reading each of them every second
is most of what watching costs.  A container gets a sample a second while it is near its
limit, growing, under pressure or recently killed, when it was made while the agent watched
(it is starting up), and for `HOT_HOLD_S` after; the others
one per `COLD_INTERVAL_S`, which still gives the forecast's cheap look its one point per 10 s.
Where the kernel can say that usage crossed a level (a v1 threshold on
`memory.usage_in_bytes`, registered through `cgroup.event_control`), a container that nears
its limit between two such samples is read at once.  On v2 the kernel has no usage threshold
a non-root reader may register, but it notifies every change of `memory.events` (inotify
IN_MODIFY, the watch the counter watcher already holds): a container whose memory.events
moved (it hit memory.high or memory.max, reclaimed at its limit, or was OOM-killed) is read at
once and every second after (`deepest`).
"""

from __future__ import annotations

from collections.abc import Sequence

from oomwatch.cgroups.discovery import WatchedCgroup
from oomwatch.cgroups.oom_events import MemcgEventfds
from oomwatch.incident import TimelineSample

COLD_INTERVAL_S = 10.0  # a container far from its limit and not growing: one sample per 10 s
# ... one per 30 s where the kernel holds its usage threshold (v1): it says when usage
# reaches half the limit, and a leak the forecast could warn of before then grows by more
# than `GROWTH_SHARE` of the limit in 30 s (see `UsageThresholds`)
QUIET_INTERVAL_S = 30.0
NEAR_LIMIT_SHARE = 0.5  # at half its limit a container is sampled every second ...
GROWTH_SHARE = 0.01  # ... and when it grew by 1 % of its limit since the last sample
HOT_HOLD_S = 120.0  # ... and for this long after either
KILLED_HOLD_S = 600.0  # after a kill (or an OOM notification) in it: the window of a timeline
MAX_THRESHOLDS = 4096  # usage-threshold eventfds, at most (one per limited v1 container)


def needs_attention(usage_bytes: int, previous_usage_bytes: int, limit_bytes: int | None) -> bool:
    """Near its limit, or grew by a real share of it since the previous sample (-1: none)."""
    if not limit_bytes:
        return False  # no limit, no OOM of its own to see coming
    if usage_bytes >= NEAR_LIMIT_SHARE * limit_bytes:
        return True
    return previous_usage_bytes >= 0 and usage_bytes - previous_usage_bytes >= (
        GROWTH_SHARE * limit_bytes
    )


class UsageThresholds:
    """A v1 memcg's usage crossing `NEAR_LIMIT_SHARE` of its limit, as the kernel notifies it
    (an eventfd per memcg, all in one epoll: `fileno()`).  Registering needs root, as the OOM
    notifications do; without it (`failure`) the cold samples alone find a container rising.
    """

    quiet_interval_s = QUIET_INTERVAL_S

    def __init__(self) -> None:
        self._events = MemcgEventfds("memory.usage_in_bytes")
        self._armed: dict[str, int] = {}  # relpath -> threshold registered (bytes)

    def armed(self, relpath: str) -> bool:
        """Whether the kernel holds this memcg's threshold (its calm samples may be sparse)."""
        return relpath in self._armed

    def fileno(self) -> int:
        return self._events.fileno()

    @property
    def failure(self) -> str | None:
        return self._events.failure

    def __len__(self) -> int:
        return len(self._armed)

    def arm(self, relpath: str, fs_path: str, limit_bytes: int | None, now_s: float) -> None:
        """Register (or move, after a resize) this memcg's threshold; none while unlimited."""
        threshold = int(NEAR_LIMIT_SHARE * limit_bytes) if limit_bytes else None
        if self._armed.get(relpath) == threshold:
            return
        self.disarm(relpath)
        if threshold is None or len(self._armed) >= MAX_THRESHOLDS:
            return
        if self._events.register(relpath, fs_path, now_s, arguments=str(threshold)):
            self._armed[relpath] = threshold

    def disarm(self, relpath: str) -> None:
        if self._armed.pop(relpath, None) is not None:
            self._events.unregister(relpath)

    def crossed(self) -> list[str]:
        """The memcgs whose usage crossed their threshold (either way) since the last look."""
        return list(self._events.fired())

    def close(self) -> None:
        self._armed.clear()
        self._events.close()


def deepest(relpaths: set[str]) -> list[str]:
    """The cgroups of `relpaths` with none of the others inside them, sorted.

    The kernel counts a v2 memory event in the cgroup and in every ancestor below the root
    (`memcg_memory_event`), so a container that hit its limit moves its pod's, its QoS
    class's and kubepods' memory.events too: only the deepest says whose limit it was.
    """
    ancestors: set[str] = set()
    for rel in relpaths:
        parts = rel.rstrip("/").split("/")
        ancestors.update("/".join(parts[:n]) for n in range(1, len(parts)))
    return sorted(rel for rel in relpaths if rel.rstrip("/") not in ancestors)


# Containers this close to their limit have their pids looked at every sample: a kill whose
# report the kernel rate-limits can then be placed by its pid.
NEAR_LIMIT_FRACTION = 0.9
MAX_NEAR_LIMIT_CGROUPS = 64


def near_limit(samples: Sequence[tuple[WatchedCgroup, TimelineSample]]) -> list[WatchedCgroup]:
    """The containers of a sample pass whose usage is near their limit (at most 64)."""
    return [
        cg
        for cg, s in samples
        if s.limit_bytes and s.usage_bytes >= NEAR_LIMIT_FRACTION * s.limit_bytes
    ][:MAX_NEAR_LIMIT_CGROUPS]
