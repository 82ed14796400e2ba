"""The kernel lab: real OOM kills in scratch memcgs, for tests, demos, benchmarks.

The lab works on whichever cgroup version holds the memory controller here
(`lab_cgroup_version`); `oomwatch.lab.vm` boots Debian's kernels under QEMU to get cgroup v2
where the host has v1.  `ScratchMemcg` makes a small-limit memcg tree and always removes it,
`kubelet_layout` names it like kubelet does, `spawn_hog` runs a workload that joins a memcg
before it allocates, `KmsgTail` collects what the kernel printed, `wait_rate_limit_window`
keeps reports whole, `provoke_kill` does all of it for one scenario and returns the raw
records.
"""

from oomwatch.lab.hierarchy import (
    lab_cgroup_version,
    lab_unavailable_reason,
    memcg_v1_unavailable_reason,
    memcg_v2_unavailable_reason,
)
from oomwatch.lab.hog import MODES as HOG_MODES
from oomwatch.lab.hog import thp_unavailable_reason
from oomwatch.lab.kmsg import KmsgTail, kmsg_message, wait_rate_limit_window
from oomwatch.lab.layout import kubelet_layout
from oomwatch.lab.memcg import Memcg, ScratchMemcg
from oomwatch.lab.scenarios import KillCapture, provoke_kill
from oomwatch.lab.spawn import HogProcess, release_gate, spawn_hog

__all__ = [
    "HOG_MODES",
    "HogProcess",
    "KillCapture",
    "KmsgTail",
    "Memcg",
    "ScratchMemcg",
    "kmsg_message",
    "kubelet_layout",
    "lab_cgroup_version",
    "lab_unavailable_reason",
    "memcg_v1_unavailable_reason",
    "memcg_v2_unavailable_reason",
    "provoke_kill",
    "release_gate",
    "spawn_hog",
    "thp_unavailable_reason",
    "wait_rate_limit_window",
]
