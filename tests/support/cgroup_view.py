"""A `CgroupView` whose looks at one cgroup the test answers (the pipeline's and the kernel
log's view of the node, without a cgroup tree)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from oomwatch.cgroups.discovery import Hierarchy
from oomwatch.daemon.cgroup_view import CgroupView
from oomwatch.incident import Timeline

V2 = (Hierarchy("/nonexistent/cgroup-v2", 2),)  # a v2 node, with no cgroup on disk


@dataclass(frozen=True, slots=True)
class FakeCgroupView(CgroupView):
    """`oom_group`, `survived` and the timeline answered by the test's callables (None:
    unknown, as for a cgroup that is gone; no timeline)."""

    oom_group_for: Callable[[str], bool | None] | None = None
    survived_for: Callable[[str, frozenset[int]], bool | None] | None = None
    freeze: Callable[[str, float], Timeline | None] | None = None

    def timeline(self, relpath: str, at_s: float) -> Timeline | None:
        return None if self.freeze is None else self.freeze(relpath, at_s)

    def timeline_due(self, relpath: str) -> bool:
        return False

    def oom_group(self, relpath: str) -> bool | None:
        return None if self.oom_group_for is None else self.oom_group_for(relpath)

    def survived(self, relpath: str, victims: frozenset[int]) -> bool | None:
        return None if self.survived_for is None else self.survived_for(relpath, victims)
