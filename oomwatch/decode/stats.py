"""What the charged memory was made of: memcg stats (v1 and v2 names) and global Node lines.

v1 names (`rss`, `cache`, `shmem`, `rss_huge`, `total_*`) and v2 names (`anon`, `file`,
`shmem`, `anon_thp`, `kernel`, ...) both occur on either hierarchy depending on the kernel
(5.3-6.1 print v2 names even for v1 memcgs).  Hierarchical `total_*` values win where
printed; the ≤5.2 one-line-per-memcg dumps are summed over the subtree instead, which is
the same thing because each page is charged to exactly one memcg.
"""

from __future__ import annotations

from oomwatch.incident import Breakdown

# Stats that count events, not bytes: kept out of `memcg_stats` (a name -> bytes map).
_EVENT_PREFIXES = (
    "pg",
    "workingset_",
    "thp_",
    "numa_",
    "pswp",
    "swpin",
    "swpout",
    "zswpin",
    "zswpout",
    "zswpwb",
    "oom",
    "hugetlb_",
    "total_pg",
    "total_workingset_",
    "total_thp_",
)
_V2_KERNEL_PARTS = ("kernel_stack", "pagetables", "sec_pagetables", "percpu", "vmalloc")


def is_byte_stat(name: str) -> bool:
    """True for stats measured in bytes (as opposed to event counters like `pgfault`)."""
    return not name.startswith(_EVENT_PREFIXES)


def _first(stats: dict[str, int], *names: str) -> int | None:
    for name in names:
        if name in stats:
            return stats[name]
    return None


def _v2_kernel(stats: dict[str, int]) -> int | None:
    if "kernel" in stats:
        return stats["kernel"]
    parts = [stats[name] for name in _V2_KERNEL_PARTS if name in stats]
    if "slab" in stats:
        parts.append(stats["slab"])
    else:
        parts.extend(stats[n] for n in ("slab_reclaimable", "slab_unreclaimable") if n in stats)
    return sum(parts) if parts else None


def memcg_breakdown(stats: dict[str, int], kmem_usage_bytes: int | None) -> Breakdown:
    """Breakdown (bytes) of a memcg from its stats; v1 kernel memory comes from `kmem:`."""
    v2 = "anon" in stats or "file" in stats
    if v2:
        return Breakdown(
            anon=stats.get("anon"),
            file=stats.get("file"),
            shmem=stats.get("shmem"),
            thp=stats.get("anon_thp"),
            kernel=_v2_kernel(stats),
        )
    return Breakdown(
        anon=_first(stats, "total_rss", "rss"),
        file=_first(stats, "total_cache", "cache"),
        shmem=_first(stats, "total_shmem", "shmem"),
        thp=_first(stats, "total_rss_huge", "rss_huge"),
        kernel=kmem_usage_bytes,
    )


def node_breakdown(nodes: list[dict[str, int]]) -> Breakdown | None:
    """Breakdown (bytes) of a global OOM from its `Node N ...kB` lines, summed over nodes."""
    if not nodes:
        return None

    def total(*names: str) -> int | None:
        values = [node[n] for node in nodes for n in names if n in node]
        return sum(values) * 1024 if values else None

    return Breakdown(
        anon=total("active_anon", "inactive_anon"),
        file=total("active_file", "inactive_file"),
        shmem=total("shmem"),
        thp=total("anon_thp"),
        kernel=total("kernel_stack", "pagetables"),
    )
