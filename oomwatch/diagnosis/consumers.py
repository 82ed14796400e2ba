"""What filled the memory: THP, tmpfs/shmem, page cache, kernel memory, many tasks, or
reserved-but-untouched address space that only looks big.

Shares are of the charged memory the kernel printed (memcg usage, else the breakdown's sum).
Both cgroup versions count shmem inside `file` (v1 `cache`) and THP inside `anon` (v1 `rss`),
so page cache is `file - shmem` and THP is a part of anon, never added on top.
"""

from __future__ import annotations

from collections import defaultdict

from oomwatch.diagnosis.evidence import (
    charged_bytes,
    charged_where,
    limit_bytes,
    page_bytes,
    pct,
    task_rss_bytes,
    victim_rss_bytes,
    who,
)
from oomwatch.incident import Finding, Incident
from oomwatch.sanitize import escape_control
from oomwatch.units import MIB, fmt_bytes

THP_MIN_SHARE = 0.25
SHMEM_MIN_SHARE = 0.40
PAGE_CACHE_MIN_SHARE = 0.40
KERNEL_MIN_SHARE = 0.25
MIN_BYTES = 8 * MIB  # below this no share is worth a finding
MANY_TASKS_MIN = 5
MANY_TASKS_MAX_TOP_SHARE = 0.5  # the largest task holds less than half of the tasks' RSS
OVERCOMMIT_MIN_RATIO = 4.0


def _share(incident: Incident, part: int | None, min_share: float) -> tuple[int, int] | None:
    whole = charged_bytes(incident)
    if part is None or whole is None or part < MIN_BYTES or part < min_share * whole:
        return None
    return part, whole


def thp_hidden(incident: Incident) -> Finding | None:
    parts = incident.breakdown_bytes
    hit = _share(incident, parts.thp if parts else None, THP_MIN_SHARE)
    if hit is None:
        return None
    thp, whole = hit
    message = (
        f"Transparent hugepages held {fmt_bytes(thp)} ({pct(thp, whole)}) of the"
        f" {fmt_bytes(whole)} {charged_where(incident)}: 2 MiB pages are charged whole even"
        " when mostly unused, and working-set dashboards (container_memory_working_set_bytes)"
        " do not break them out; check /sys/kernel/mm/transparent_hugepage/enabled (set"
        " `madvise` or `never`) and the application's madvise(MADV_HUGEPAGE) / allocator"
        " settings (e.g. jemalloc thp, glibc.malloc.hugetlb)."
    )
    return Finding("thp-hidden", "warning", message, {"thp_bytes": thp, "charged_bytes": whole})


def tmpfs_shmem(incident: Incident) -> Finding | None:
    parts = incident.breakdown_bytes
    hit = _share(incident, parts.shmem if parts else None, SHMEM_MIN_SHARE)
    if hit is None:
        return None
    shmem, whole = hit
    message = (
        f"Shared memory (tmpfs, /dev/shm, memory-backed emptyDir) held {fmt_bytes(shmem)}"
        f" ({pct(shmem, whole)}) of the {fmt_bytes(whole)} {charged_where(incident)}: files"
        " written there stay in memory and count against the limit even when no process maps"
        " them (e.g. PyTorch DataLoader workers passing batches through /dev/shm); delete"
        " them, bound the emptyDir sizeLimit, or account for it in the limit."
    )
    return Finding(
        "tmpfs-shmem", "warning", message, {"shmem_bytes": shmem, "charged_bytes": whole}
    )


def page_cache(incident: Incident) -> Finding | None:
    parts = incident.breakdown_bytes
    if parts is None or parts.file is None or parts.shmem is None:
        return None
    hit = _share(incident, parts.file - parts.shmem, PAGE_CACHE_MIN_SHARE)
    if hit is None:
        return None
    cache, whole = hit
    message = (
        f"File page cache held {fmt_bytes(cache)} ({pct(cache, whole)}) of the"
        f" {fmt_bytes(whole)} {charged_where(incident)}; clean cache is normally reclaimed"
        " before an OOM, so this is cache the kernel could not drop in time: dirty or"
        " writeback pages, or files mapped and in use."
    )
    evidence = {"file_bytes": parts.file, "shmem_bytes": parts.shmem, "charged_bytes": whole}
    return Finding("page-cache", "warning", message, evidence)


def kernel_memory(incident: Incident) -> Finding | None:
    parts = incident.breakdown_bytes
    kernel = parts.kernel if parts else None
    source = "kernel"
    if kernel is None and incident.memcg and incident.memcg.kmem_usage_bytes is not None:
        kernel, source = incident.memcg.kmem_usage_bytes, "kmem_usage_bytes"
    hit = _share(incident, kernel, KERNEL_MIN_SHARE)
    if hit is None:
        return None
    kbytes, whole = hit
    message = (
        f"Kernel memory (slab, page tables, kernel stacks, socket buffers) held"
        f" {fmt_bytes(kbytes)} ({pct(kbytes, whole)}) of the {fmt_bytes(whole)}"
        f" {charged_where(incident)}: not visible as process RSS; look for many threads, sockets,"
        " open files or dentries."
    )
    evidence = {"kernel_bytes": kbytes, "source": source, "charged_bytes": whole}
    return Finding("kernel-memory", "warning", message, evidence)


def many_processes(incident: Incident) -> Finding | None:
    """Memory spread over many tasks: no one process is 'the' culprit.

    Only where the task table lists one workload's tasks (a container's, a pod's or a plain
    cgroup's limit); a global or node-level report lists every process on the node.
    """
    if incident.kind != "memcg" or incident.limit_scope not in ("container", "pod", "cgroup"):
        return None
    page = page_bytes(incident)
    sized = [(t, task_rss_bytes(t, page)) for t in incident.tasks]
    rows = [(t, b) for t, b in sized if b is not None]
    if len(rows) < MANY_TASKS_MIN:
        return None
    total = sum(b for _, b in rows)
    top = max(b for _, b in rows)
    if total < MIN_BYTES or top >= MANY_TASKS_MAX_TOP_SHARE * total:
        return None
    by_name: dict[str, list[int]] = defaultdict(list)
    for task, rss in rows:
        by_name[task.name].append(rss)
    groups = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
    listing = ", ".join(
        f"{escape_control(name)} ×{len(sizes)} {fmt_bytes(sum(sizes))}"
        for name, sizes in groups[:5]
    )
    message = (
        f"{len(rows)} processes shared {fmt_bytes(total)} of RSS and the largest held only"
        f" {fmt_bytes(top)} ({pct(top, total)}): {listing}. Killing one frees little; bound the"
        " number of workers or their size."
    )
    evidence = {
        "task_count": len(rows),
        "tasks_rss_bytes": total,
        "largest_task_rss_bytes": top,
        "page_bytes": page,
        "by_name": [{"name": n, "count": len(s), "rss_bytes": sum(s)} for n, s in groups[:10]],
    }
    return Finding("many-processes", "info", message, evidence)


def overcommit_vm(incident: Incident) -> Finding | None:
    """total-vm far above RSS and above the limit: address space reserved, never touched."""
    victim = incident.victim
    limit = limit_bytes(incident)
    if victim is None or victim.total_vm_bytes is None or limit is None:
        return None
    rss = victim_rss_bytes(victim)
    total_vm = victim.total_vm_bytes
    if not rss or total_vm < OVERCOMMIT_MIN_RATIO * rss or total_vm <= limit:
        return None
    message = (
        f"{who(incident)} had {fmt_bytes(total_vm)} of virtual memory (total-vm),"
        f" {total_vm / rss:.0f}× its {fmt_bytes(rss)} RSS and above the {fmt_bytes(limit)}"
        " limit: address space reserved but never touched (allowed by vm.overcommit_memory)."
        " Only touched pages count against the limit, so total-vm is not what ran out."
    )
    evidence = {"total_vm_bytes": total_vm, "rss_bytes": rss, "limit_bytes": limit}
    return Finding("overcommit-vm", "info", message, evidence)
