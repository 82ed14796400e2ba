"""Pure parsers for the single lines of a kernel OOM report, every kernel generation.

Each takes one kernel message (prefix already removed) and returns what it says, or None.
Process and cgroup names are hostile (spaces, commas, parentheses, `) total-vm:1kB`), so
every pattern anchors on the kernel's fixed text and reads the kernel's own fields from the
END of the line, where a name cannot reach.  Numbers match at most 20 digits (64 bits), so
`int()` never meets a hostile 5000-digit run (which it would refuse with an error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from oomwatch.decode.kill_lines import OOM_MESSAGE as _OOM_MESSAGE
from oomwatch.decode.kill_lines import killed_now as killed_now
from oomwatch.decode.kill_lines import parse_kill_select as parse_kill_select
from oomwatch.decode.kill_lines import parse_killed as parse_killed
from oomwatch.decode.kill_lines import victim_now as victim_now
from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.incident import UNLIMITED_BYTES, Invoker

_S = re.S  # names may hold newlines (a /dev/kmsg `\x0a` inside a comm)
_INVOKED = lazy_compile(
    r"(?P<comm>.*) invoked oom-killer: gfp_mask=(?P<gfp>0x[0-9a-fA-F]+(?:\([^)]*\))?),"
    r"(?: nodemask=(?P<nodemask>\S*?),)?\s*order=(?P<order>-?\d{1,20})"
    r"(?P<rest>(?:,\s*(?:oomkilladj|oom_adj|oom_score_adj)=-?\d{1,20})*)\s*$",
    _S,
)
# A header someone abridged (`java invoked oom-killer: ...`, fields left out or elided):
# whatever of the kernel's fields remain, read where they are.  The name must fit a comm
# (TASK_COMM_LEN 16, so 15 bytes) for prose that mentions the killer not to become a header.
_INVOKED_LOOSE = lazy_compile(r"(?P<comm>\S.{0,15}?) invoked oom-killer:(?P<rest>.*)$", _S)
# 2.6.11-2.6.17 printed the header without the task: `oom-killer: gfp_mask=0xd0[, order=0]`.
_OLD_HEADER = lazy_compile(
    r"oom-killer: gfp_mask=(0x[0-9a-fA-F]{1,20})(?:, order=(-?\d{1,20}))?\s*$"
)
_GFP = lazy_compile(r"\bgfp_mask=(0x[0-9a-fA-F]{1,20}(?:\([^)]{0,400}\))?)")
_ORDER = lazy_compile(r"\border=(-?\d{1,20})\b")
_ADJ = lazy_compile(r"\boom_score_adj=(-?\d{1,20})")
_OLD_ADJ = lazy_compile(r"\b(oomkilladj|oom_adj)=(-?\d{1,20})")
_CPU_PID = lazy_compile(
    r"CPU: \d{1,20} (?:UID: \d{1,20} )?PID: (\d{1,20}) Comm: |Pid: (\d{1,20}), comm: "
)
_TASK_IN = lazy_compile(r"Task in (?P<task>.*?) killed as a result of limit of (?P<oom>.*)$", _S)
_LIMIT_REACHED = lazy_compile(r"Memory limit reached of cgroup (?P<oom>.*)$", _S)
_USAGE = lazy_compile(
    r"(memory|memory\+swap|swap|kmem): usage (\d{1,20})kB, limit (\d{1,20})kB,"
    r" failcnt (\d{1,20})\s*$"
)
_STATS_HEADER = lazy_compile(r"Memory cgroup stats for (?P<path>.*?):(?P<rest>(?:\s.*)?)$", _S)
_INLINE_STAT = lazy_compile(r"(\w+):(-?\d{1,20})KB")
_STAT_LINE = lazy_compile(r"([a-z][a-z0-9_]*) (\d{1,20})\s*$")
_GROUP = lazy_compile(
    r"Tasks in (?P<path>.*) are going to be killed due to memory\.oom\.group set\s*$", _S
)
_REAPED = lazy_compile(
    r"oom_reaper: reaped process (?P<pid>\d{1,20}) \((?P<comm>.*)\),"
    r" now anon-rss:(?P<anon>\d{1,20})kB,"
    r"\s*file-rss:(?P<file>\d{1,20})kB(?:,\s*shmem-rss:(?P<shmem>\d{1,20})kB)?\s*$",
    _S,
)
_EXITING = lazy_compile(
    rf"(?:{_OOM_MESSAGE}: )?OOM victim"
    r" (?P<pid>\d{1,20}) \((?P<comm>.*)\) is already exiting\."
    r" Skip killing the task\s*$",
    _S,
)
_NODE_MEMINFO = lazy_compile(r"Node \d{1,20} active_anon:")
# show_mem's page-count lines after `Mem-Info:` (`active_anon:239 inactive_anon:6955 ...`).
_PAGE_COUNTS = lazy_compile(r"(?:[a-z_]{1,40}:\d{1,20}\s*){1,12}")
_PAGE_COUNT = lazy_compile(r"([a-z_]{1,40}):(\d{1,20})")
# The buddy allocator's free lists (`Node 0 Normal: 12*8kB (UME) 3*16kB ...`): order 0
# first, and an order-0 block is one page.
_BUDDY = lazy_compile(r"(?:Node \d{1,4} )?\w{1,16}: \d{1,20}\*(\d{1,7})kB\b")
# lib/ratelimit.c prints `<function>: N callbacks suppressed` when a rate-limited call is
# let through again; mm/oom_kill.c rate-limits the report header in oom_kill_process().
_SUPPRESSED = lazy_compile(r"oom_kill_process: (\d{1,20}) callbacks suppressed\s*$")
_NODE_FIELD = lazy_compile(r"(\w+):\s?(\d{1,20})kB")
_OOM_KILL_HEAD = lazy_compile(
    r"(?:constraint=(?P<constraint>[^,]*))?(?:,?nodemask=(?P<nodemask>\(null\)|[\d,\-]*?))?"
    r"(?:,cpuset=(?P<cpuset>.*?),mems_allowed=(?P<mems>[\d,\-]*))?$",
    _S,
)
# The memcg OOM path's own entry point in a call trace (3.x-6.x), as a frame the unwinder
# is sure of: x86 ` mem_cgroup_out_of_memory+0x..`, `[<addr>] mem_cgroup_out_of_memory+..`,
# arm's `... from mem_cgroup_out_of_memory+..`; a `? ` frame is a stale guess.
_MEMCG_OOM_FRAME = lazy_compile(r"(?<!\? )\bmem_cgroup_out_of_memory(?:\.\w+)?\+0x")
_PID_UID_TAIL = lazy_compile(r",pid=(\d{1,20}),uid=(\d{1,20})\s*$")


def kib(value: int | None) -> int | None:
    """kB as the kernel prints them -> bytes (the incident's one unit)."""
    return None if value is None else value * 1024


def limit_kib(value: int) -> int | None:
    """A printed limit in kB -> bytes; None for the kernel's "no limit" (its maximum)."""
    size = value * 1024
    return None if size >= UNLIMITED_BYTES else size


def _int(value: str | None) -> int | None:
    return int(value) if value is not None else None


def parse_invoked(message: str) -> tuple[Invoker, str | None] | None:
    """`<comm> invoked oom-killer: gfp_mask=..., order=N, oom_score_adj=N` (2.6.18 on), and
    2.6.11-2.6.17's `oom-killer: gfp_mask=...[, order=N]` (no task named).

    Returns the invoker and a note: pre-2.6.36 `oomkilladj=` (not an oom_score_adj), or that
    the line was abridged (only the fields it still has are read).
    """
    match = _INVOKED.match(message)
    if match is None:
        old = _OLD_HEADER.match(message)
        if old is not None:
            order = int(old.group(2)) if old.group(2) is not None else None
            return Invoker(gfp_mask=old.group(1), order=order), None
        return _parse_invoked_abridged(message)
    rest = match.group("rest")
    adj = _ADJ.search(rest)
    old = _OLD_ADJ.search(rest)
    note = f"invoker {old.group(1)}={old.group(2)} (pre-oom_score_adj scale)" if old else None
    invoker = Invoker(
        comm=match.group("comm"),
        gfp_mask=match.group("gfp"),
        order=int(match.group("order")),
        oom_score_adj=int(adj.group(1)) if adj else None,
    )
    return invoker, note


def _parse_invoked_abridged(message: str) -> tuple[Invoker, str | None] | None:
    match = _INVOKED_LOOSE.match(message)
    if match is None:
        return None
    rest = match.group("rest")
    gfp, order, adj = _GFP.search(rest), _ORDER.search(rest), _ADJ.search(rest)
    invoker = Invoker(
        comm=match.group("comm"),
        gfp_mask=gfp.group(1) if gfp else None,
        order=int(order.group(1)) if order else None,
        oom_score_adj=int(adj.group(1)) if adj else None,
    )
    return invoker, "the `invoked oom-killer` line is abridged: fields it lacks are unknown"


def is_memcg_oom_frame(message: str) -> bool:
    """A call-trace line through mem_cgroup_out_of_memory(): the OOM is a memcg's."""
    return _MEMCG_OOM_FRAME.search(message) is not None


def parse_cpu_pid(message: str) -> int | None:
    """The pid in dump_stack's `CPU: N PID: P Comm: ...` (or 2.6's `Pid: P, comm: ...`)."""
    match = _CPU_PID.match(message)
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


def parse_task_in(message: str) -> tuple[str | None, str] | None:
    """≤4.19 `Task in <task memcg> killed as a result of limit of <oom memcg>`."""
    match = _TASK_IN.match(message)
    if match:
        return match.group("task"), match.group("oom")
    match = _LIMIT_REACHED.match(message)
    if match:
        return None, match.group("oom")
    return None


def parse_usage(message: str) -> tuple[str, int, int, int] | None:
    """`memory:`/`swap:`/`memory+swap:`/`kmem:` lines: (which, usage_kb, limit_kb, failcnt)."""
    match = _USAGE.match(message)
    if match is None:
        return None
    return match.group(1), int(match.group(2)), int(match.group(3)), int(match.group(4))


def parse_stats_header(message: str) -> tuple[str, dict[str, int] | None] | None:
    """`Memory cgroup stats for <path>:` and, in ≤5.2, the inline `key:NKB` stats (as bytes)."""
    match = _STATS_HEADER.match(message)
    if match is None:
        return None
    rest = match.group("rest").strip()
    if not rest:
        return match.group("path"), None
    return match.group("path"), {k: int(v) * 1024 for k, v in _INLINE_STAT.findall(rest)}


def parse_stat_line(message: str) -> tuple[str, int] | None:
    """One `key value` line of the 5.3+ stats dump (value as printed: bytes or a count)."""
    match = _STAT_LINE.match(message)
    return (match.group(1), int(match.group(2))) if match else None


@dataclass(frozen=True, slots=True)
class OomKillLine:
    """The 5.0+ one-line summary `oom-kill:constraint=...,task=...,pid=...,uid=...`."""

    constraint: str | None
    nodemask: str | None
    cpuset: str | None
    mems_allowed: str | None
    oom_memcg: str | None
    global_oom: bool
    task_memcg: str | None
    task: str | None
    pid: int | None
    uid: int | None


def parse_oom_kill(message: str) -> OomKillLine | None:
    """Parse the summary line; the task name is read between `,task=` and the final pid/uid."""
    if not message.startswith("oom-kill:"):
        return None
    body = message[len("oom-kill:") :]
    pid = uid = None
    tail = _PID_UID_TAIL.search(body)
    if tail:
        pid, uid = int(tail.group(1)), int(tail.group(2))
        body = body[: tail.start()]
    idx_om = body.find(",oom_memcg=")
    idx_global = body.find(",global_oom")
    idx_tm = body.find(",task_memcg=")
    context_end = max(
        idx_tm + len(",task_memcg=") if idx_tm >= 0 else -1,
        idx_om + len(",oom_memcg=") if idx_om >= 0 else -1,
        idx_global + len(",global_oom") if idx_global >= 0 else -1,
        0,
    )
    idx_task = body.find(",task=", context_end)
    if idx_task < 0 and body.startswith("task=", context_end):
        idx_task = context_end - 1
    task = body[idx_task + len(",task=") :] if idx_task >= 0 else None
    end_of_context = idx_task if idx_task >= 0 else len(body)
    task_memcg = body[idx_tm + len(",task_memcg=") : end_of_context] if idx_tm >= 0 else None
    oom_memcg = None
    if idx_om >= 0:
        stop = idx_tm if idx_tm > idx_om else end_of_context
        oom_memcg = body[idx_om + len(",oom_memcg=") : stop]
    markers = [i for i in (idx_om, idx_global, idx_tm, idx_task) if i >= 0]
    head_text = body[: min(markers)] if markers else body
    head = _OOM_KILL_HEAD.match(head_text)
    return OomKillLine(
        constraint=head.group("constraint") if head else None,
        nodemask=head.group("nodemask") if head else None,
        cpuset=head.group("cpuset") if head else None,
        mems_allowed=head.group("mems") if head else None,
        oom_memcg=oom_memcg,
        global_oom=idx_global >= 0 and (idx_om < 0 or idx_global < idx_om),
        task_memcg=task_memcg,
        task=task,
        pid=pid,
        uid=uid,
    )


def parse_group(message: str) -> str | None:
    """`Tasks in <memcg> are going to be killed due to memory.oom.group set` -> the memcg."""
    match = _GROUP.match(message)
    return match.group("path") if match else None


def parse_reaped(message: str) -> tuple[int, str, int] | None:
    """`oom_reaper: reaped process N (comm), now anon-rss:...` -> (pid, comm, anon_rss_kb)."""
    match = _REAPED.match(message)
    if match is None:
        return None
    return int(match.group("pid")), match.group("comm"), int(match.group("anon"))


def parse_already_exiting(message: str) -> tuple[int, str] | None:
    """5.9+ `OOM victim N (comm) is already exiting. Skip killing the task`."""
    match = _EXITING.match(message)
    return (int(match.group("pid")), match.group("comm")) if match else None


def parse_node_meminfo(message: str) -> dict[str, int] | None:
    """Global OOM `Node N active_anon:...kB ...` line -> {field: kB}."""
    if not _NODE_MEMINFO.match(message):
        return None
    return {k: int(v) for k, v in _NODE_FIELD.findall(message)}


def parse_page_counts(message: str) -> dict[str, int] | None:
    """A show_mem page-count line (`active_file:23 inactive_file:30 ...`) -> {field: pages}."""
    if not _PAGE_COUNTS.fullmatch(message):
        return None
    return {k: int(v) for k, v in _PAGE_COUNT.findall(message)}


def parse_buddy_page_kb(message: str) -> int | None:
    """The order-0 block size (the page size, in kB) of a buddy free-list line."""
    match = _BUDDY.match(message)
    return int(match.group(1)) if match else None


def parse_suppressed(message: str) -> int | None:
    """`oom_kill_process: N callbacks suppressed` -> N (the kernel withheld N reports)."""
    match = _SUPPRESSED.match(message)
    return int(match.group(1)) if match else None


# How an OOM ends when nothing can be killed (noted on the incident).
OOM_END_LINES = (
    "Out of memory and no killable processes",
    "Kernel panic - not syncing: System is deadlocked on memory",
    "Kernel panic - not syncing: Out of memory",
)


# node-problem-detector relays the kernel's kill lines as a Kubernetes Event with reason
# `OOMKilling` (`kubectl get events`: columns, then the lines joined by a newline or a
# space).  Only there are kernel lines read inside another program's line: an application
# quoting one is not one.
_RELAYED = lazy_compile(r"\bOOMKilling[\s:]+(?=(?:" + _OOM_MESSAGE + r"): Kill)")
_RELAYED_SPLIT = lazy_compile(
    r"(?<!:)\s+(?=Killed process \d)|(?<!cgroup)\s+(?=(?:" + _OOM_MESSAGE + r"): Kill)"
)


def message_lines(message: str) -> list[str]:
    """Split a multi-line record, but only the kinds the kernel prints as several lines,
    and the kernel lines of an `OOMKilling` Event.

    A newline anywhere else comes from a name (an escaped `\\x0a` in a comm) and must not
    cut a kill line in two.
    """
    if "OOMKilling" in message:
        relayed = _RELAYED.search(message)
        if relayed is not None:
            return _RELAYED_SPLIT.split(message[relayed.end() :])
    if "\n" not in message:
        return [message]
    first = message.split("\n", 1)[0].strip()
    if parse_stat_line(first) is not None or first.startswith(
        ("active_anon:", "Memory cgroup stats for", "Mem-Info")
    ):
        return [part.strip() for part in message.split("\n") if part.strip()]
    return [message]
