"""Container memory cgroups: discovery, OOM counter deltas, live processes, memory timeline."""

from oomwatch.cgroups.counters import CounterDelta, OomCounters
from oomwatch.cgroups.discovery import Hierarchy, WatchedCgroup, find_hierarchies
from oomwatch.cgroups.timeline import TimelineSampler
from oomwatch.cgroups.watcher import CgroupWatcher

__all__ = [
    "CgroupWatcher",
    "CounterDelta",
    "Hierarchy",
    "OomCounters",
    "TimelineSampler",
    "WatchedCgroup",
    "find_hierarchies",
]
