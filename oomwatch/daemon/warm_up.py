"""Two kills decoded, reconciled, diagnosed and rendered at start-up, and thrown away, so the
agent's first real kill costs what later ones do.

In a fresh process the first report took ~1.5 ms of CPU more than later ones (decode 2.2 ms
against 0.9; bench/RESULTS.md, "Issue 26, sixth round"): patterns compiled at their first use
(`decode.lazy_re`), and CPython 3.11's specialising interpreter, which rewrites a function's
bytecode for the types it meets only after the function has run a few times (PEP 659).  The
reports below are one of each cgroup version, written here in /dev/kmsg's record form
(`prefix;message`, Documentation/ABI/testing/dev-kmsg); nothing of them reaches the store, the
metrics, the log or the cluster.  The pipeline's own stages are run (not copies), so what is
warmed is what the first kill runs.
"""

from __future__ import annotations

import time

from oomwatch.cgroup_identity import annotate
from oomwatch.diagnosis.history import History
from oomwatch.incident import Incident
from oomwatch.reconcile import CgroupNews, CounterKills, ReconcileState, reconcile
from oomwatch.sinks.eventlog import rendered
from oomwatch.sinks.log import INCIDENT_EVENT, incident_fields
from oomwatch.sources.kernel_log import KernelLog
from oomwatch.stages import EventLogger
from oomwatch.store.limits import bounded

# CPython quickens a function after 8 calls or loop turns (`co_warmup`, Python/specialize.c),
# so a few rounds of both reports reach the specialised code the first real kill then runs.
WARM_UP_ROUNDS = 4

_V1_POD = "/kubepods/burstable/pod0a0e0000-0000-4000-8000-00000000a001/" + "c0" * 32
_V2_POD = (
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod0a0e0000_0000_4000_8000_00000000a002.slice/"
    "cri-containerd-" + "c1" * 32 + ".scope"
)
_STACK = (
    "Call Trace:",
    " <TASK>",
    " dump_stack_lvl+0x57/0x80",
    " dump_header+0x43/0x1c0",
    " oom_kill_process+0xfa/0x200",
    " out_of_memory+0x214/0x500",
    " mem_cgroup_out_of_memory+0xc0/0x110",
    " try_charge_memcg+0x422/0x6f0",
    " </TASK>",
)
_TABLE_HEADER = (
    "Tasks state (memory values in pages):",
    "[  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes"
    " swapents oom_score_adj name",
)


def _stat_lines(**values: int) -> tuple[str, ...]:
    """memory.stat as the report prints it: `name value`, one a line."""
    return tuple(f"{name} {value}" for name, value in values.items())


def _report(pid: int, cgroup: str, usage: tuple[str, ...], stats: tuple[str, ...]) -> list[str]:
    """The lines of one memcg kill, as the kernel prints them (mm/oom_kill.c, dump_header()
    and __oom_kill_process(); mm/memcontrol.c, mem_cgroup_print_oom_meminfo())."""
    return [
        "warm-up invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        f"CPU: 0 UID: 0 PID: {pid} Comm: warm-up Not tainted 6.12.0 #1",
        *_STACK,
        *usage,
        f"Memory cgroup stats for {cgroup}:",
        *stats,
        *_TABLE_HEADER,
        f"[{pid:>7}]     0 {pid:>5}    28812    11487     9856     1631         0   135168"
        "        0             0 warm-up",
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
        f"oom_memcg={cgroup},task_memcg={cgroup},task=warm-up,pid={pid},uid=0",
        f"Memory cgroup out of memory: Killed process {pid} (warm-up) total-vm:115248kB,"
        " anon-rss:39424kB, file-rss:6524kB, shmem-rss:0kB, UID:0 pgtables:132kB"
        " oom_score_adj:0",
        f"oom_reaper: reaped process {pid} (warm-up), now anon-rss:0kB, file-rss:0kB,"
        " shmem-rss:0kB",
    ]


_V1_LINES = _report(
    4201,
    _V1_POD,
    (
        "memory: usage 32768kB, limit 32768kB, failcnt 12",
        "memory+swap: usage 32768kB, limit 32768kB, failcnt 0",
        "kmem: usage 72kB, limit 9007199254740988kB, failcnt 0",
    ),
    _stat_lines(
        cache=0,
        rss=33480704,
        rss_huge=0,
        shmem=0,
        mapped_file=0,
        swap=0,
        inactive_anon=33415168,
        active_anon=0,
        hierarchical_memory_limit=33554432,
        total_cache=0,
        total_rss=33480704,
        total_swap=0,
    ),
)
_V2_LINES = _report(
    4202,
    _V2_POD,
    ("memory: usage 65536kB, limit 65536kB, failcnt 20", "swap: usage 0kB, limit 0kB, failcnt 0"),
    _stat_lines(
        anon=66969600,
        file=0,
        kernel=139264,
        kernel_stack=0,
        pagetables=131072,
        sock=0,
        shmem=0,
        file_mapped=0,
        anon_thp=65011712,
        inactive_anon=0,
        active_anon=66969600,
        inactive_file=0,
        active_file=0,
        slab=2240,
    ),
)


def _records(lines: list[str], first_seq: int) -> list[tuple[int, bytes]]:
    """/dev/kmsg records: `level,seq,usec,-;message` (the kill line at KERN_ERR, as printed)."""
    out = []
    for index, line in enumerate(lines):
        level = 3 if "Killed process" in line else 4 if index < len(_STACK) + 2 else 6
        seq = first_seq + index
        out.append((seq, f"{level},{seq},{1_000_000 + index * 10},-;{line}\n".encode()))
    return out


WARM_UP_REPORTS = (_records(_V1_LINES, 1), _records(_V2_LINES, 1000))


def warm_up_kill(records: list[tuple[int, bytes]], log: EventLogger) -> list[Incident]:
    """One report through the stages a kill takes (decode, reconcile with its counter rise,
    annotate, diagnose, the stored form, the log line's fields and rendering); returns the
    incidents as they would have been stored."""
    kernel = KernelLog(None, None, None, log, on_lost=lambda _records: None)
    decoded = kernel.decode(records) + kernel.flush()
    now_s = time.monotonic()
    rises = [CounterKills(i.task_memcg, 1, now_s) for i in decoded if i.task_memcg]
    news = CgroupNews(kills=rises, counted_at_s=now_s)
    stored = []
    for incident in reconcile(ReconcileState(), decoded, news, now_s).ready:
        diagnosed = History().diagnose(annotate(incident))
        kept, _json = bounded(diagnosed)
        rendered("warning", INCIDENT_EVENT, incident_fields(kept))
        stored.append(kept)
    return stored


def warm_up(log: EventLogger, rounds: int = WARM_UP_ROUNDS) -> None:
    """(Once, at start-up) run `WARM_UP_REPORTS` through the kill path `rounds` times.  A
    failure is logged and start-up goes on: warming is never worth a crash."""
    try:
        for _ in range(rounds):
            for records in WARM_UP_REPORTS:
                warm_up_kill(records, log)
    except Exception as exc:
        log.error(
            "warm_up_failed",
            error=f"{type(exc).__name__}: {exc}",
            consequence="the first kill is decoded cold (slower), nothing else",
        )
