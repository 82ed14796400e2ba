"""A scratch memcg tree on one cgroup version, with what differs between the versions.

The real-kernel suites that hold on both versions take the `kernel_tree` fixture (tests/
conftest.py), parametrized `v1` / `v2`: this machine runs the `v1` cases, the lab VM the `v2`
ones (`-m cgroup_v2`, oomwatch.lab.vm.GUEST_SUITE).  A test reads a version's difference
here, not from an `if` of its own, so the two runs assert the same things.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from oomwatch.lab import Memcg, ScratchMemcg
from oomwatch.lab.hierarchy import Version

__all__ = ["KernelTree", "node_findings"]

THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def node_findings(thp_enabled: Path = THP_ENABLED) -> set[str]:
    """Findings a node's settings add to any kill of anonymous memory, whatever the version:
    `thp-hidden` where transparent hugepages are `[always]` (the lab VM's Debian kernels; this
    machine has `[madvise]`), since a hog's anonymous memory is then mostly huge pages."""
    always = thp_enabled.exists() and "[always]" in thp_enabled.read_text()
    return {"thp-hidden"} if always else set()


@dataclass(frozen=True, slots=True)
class KernelTree:
    """One scratch tree of one version (removed by the fixture after the test)."""

    scratch: ScratchMemcg

    @property
    def version(self) -> Version:
        return self.scratch.version

    @property
    def anon_stat(self) -> str:
        """The memory.stat name of anonymous memory in the kernel's OOM report."""
        return "rss" if self.version == 1 else "anon"

    @property
    def other_anon_stat(self) -> str:
        """The other version's name, which this version's report must not print."""
        return "anon" if self.version == 1 else "rss"

    @property
    def thp_stat(self) -> str:
        """The memory.stat name of anonymous huge pages in the kernel's OOM report."""
        return "rss_huge" if self.version == 1 else "anon_thp"

    def psi_cgroup(self, memcg: Memcg) -> tuple[str, Path]:
        """Where a PSI trigger sees `memcg`'s memory stalls (relpath, directory): its own
        memory.pressure on v2; on v1 the unified hierarchy's root, which has no memory
        controller but counts every task's stalls (absent where PSI is off)."""
        if self.version == 2:
            return memcg.relpath, memcg.fs_path
        return "/", Path("/sys/fs/cgroup/unified")

    @property
    def counts_events(self) -> bool:
        """v2 keeps memory.events (hierarchical) and memory.events.local; v1 has neither."""
        return self.version == 2

    @property
    def records_fixtures(self) -> bool:
        """The scenarios of v2 are kept for the fast tests (tests/data/kernel-v2)."""
        return self.version == 2
