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

from oomwatch.incident import Invoker, Victim

_S = re.S  # names may hold newlines (a /dev/kmsg `\x0a` inside a comm)

# The kernel's own `<message>` before a kill line (identical 2.6 -> 6.19, bar 2.6's case).
_OOM_MESSAGE = (
    r"(?i:out of memory)(?: \(oom_kill_allocating_task\))?|Memory cgroup out of memory"
)
_INVOKED = re.compile(
    r"(?P<comm>.*) invoked oom-killer: gfp_mask=(?P<gfp>0x[0-9a-fA-F]+(?:\([^)]*\))?),"
    r"(?: nodemask=(?P<nodemask>\S*?),)?\s*order=(?P<order>-?\d{1,20})"
    r"(?P<rest>(?:,\s*(?:oomkilladj|oom_adj|oom_score_adj)=-?\d{1,20})*)\s*$",
    _S,
)
_ADJ = re.compile(r"\boom_score_adj=(-?\d{1,20})")
_OLD_ADJ = re.compile(r"\b(oomkilladj|oom_adj)=(-?\d{1,20})")
_CPU_PID = re.compile(
    r"CPU: \d{1,20} (?:UID: \d{1,20} )?PID: (\d{1,20}) Comm: |Pid: (\d{1,20}), comm: "
)
_TASK_IN = re.compile(r"Task in (?P<task>.*?) killed as a result of limit of (?P<oom>.*)$", _S)
_LIMIT_REACHED = re.compile(r"Memory limit reached of cgroup (?P<oom>.*)$", _S)
_USAGE = re.compile(
    r"(memory|memory\+swap|swap|kmem): usage (\d{1,20})kB, limit (\d{1,20})kB,"
    r" failcnt (\d{1,20})\s*$"
)
_STATS_HEADER = re.compile(r"Memory cgroup stats for (?P<path>.*?):(?P<rest>(?:\s.*)?)$", _S)
_INLINE_STAT = re.compile(r"(\w+):(-?\d{1,20})KB")
_STAT_LINE = re.compile(r"([a-z][a-z0-9_]*) (\d{1,20})\s*$")
_KILLED = re.compile(
    rf"(?:(?P<msg>{_OOM_MESSAGE}): )?Killed process"
    r" (?P<pid>\d{1,20})(?:, UID (?P<uid_old>\d{1,20}),)? \((?P<comm>.*)\)"
    r"(?: (?:total-vm|vsz):(?P<vm>\d{1,20})kB)?(?:,\s*anon-rss:(?P<anon>\d{1,20})kB)?"
    r"(?:,\s*file-rss:(?P<file>\d{1,20})kB)?(?:,\s*shmem-rss:(?P<shmem>\d{1,20})kB)?"
    r"(?:,\s*UID:(?P<uid>\d{1,20}))?(?:\s*pgtables:(?P<pgt>\d{1,20})kB)?"
    r"(?:\s*oom_score_adj:(?P<adj>-?\d{1,20}))?\.?\s*$",
    _S,
)
_KILL_SELECT = re.compile(
    rf"(?:(?P<msg>{_OOM_MESSAGE}): )?[Kk]ill process"
    r" (?P<pid>\d{1,20}) \((?P<comm>.*)\)"
    r" score (?P<score>-?\d{1,20}) (?:or sacrifice child|or a child|and children\.?)\s*$",
    _S,
)
_GROUP = re.compile(
    r"Tasks in (?P<path>.*) are going to be killed due to memory\.oom\.group set\s*$", _S
)
_REAPED = re.compile(
    r"oom_reaper: reaped process (?P<pid>\d{1,20}) \((?P<comm>.*)\),"
    r" now anon-rss:(?P<anon>\d{1,20})kB,"
    r"\s*file-rss:(?P<file>\d{1,20})kB(?:,\s*shmem-rss:(?P<shmem>\d{1,20})kB)?\s*$",
    _S,
)
_EXITING = re.compile(
    rf"(?:{_OOM_MESSAGE}: )?OOM victim"
    r" (?P<pid>\d{1,20}) \((?P<comm>.*)\) is already exiting\."
    r" Skip killing the task\s*$",
    _S,
)
_NODE_MEMINFO = re.compile(r"Node \d{1,20} active_anon:")
_NODE_FIELD = re.compile(r"(\w+):\s?(\d{1,20})kB")
_OOM_KILL_HEAD = re.compile(
    r"(?:constraint=(?P<constraint>[^,]*))?(?:,?nodemask=(?P<nodemask>\(null\)|[\d,\-]*?))?"
    r"(?:,cpuset=(?P<cpuset>.*?),mems_allowed=(?P<mems>[\d,\-]*))?$",
    _S,
)
_PID_UID_TAIL = re.compile(r",pid=(\d{1,20}),uid=(\d{1,20})\s*$")


def _int(value: str | None) -> int | None:
    return int(value) if value is not None else None


def parse_invoked(message: str) -> tuple[Invoker, str | None] | None:
    """`<comm> invoked oom-killer: gfp_mask=..., order=N, oom_score_adj=N` (all versions).

    Returns the invoker and a note for pre-2.6.36 `oomkilladj=` (not an oom_score_adj).
    """
    match = _INVOKED.match(message)
    if match is None:
        return None
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


def parse_killed(message: str) -> tuple[str | None, Victim] | None:
    """`[<message>: ]Killed process N (comm) total-vm:...` in every version: (message, victim).

    2.6.18 prints just `Killed process N (comm).`; 2.6.32 (RHEL 6) `Killed process N, UID U,
    (comm) total-vm:...`.
    """
    if "Killed process " not in message:
        return None
    match = _KILLED.match(message)
    if match is None:
        return None
    victim = Victim(
        pid=int(match.group("pid")),
        comm=match.group("comm"),
        total_vm_kb=_int(match.group("vm")),
        anon_rss_kb=_int(match.group("anon")),
        file_rss_kb=_int(match.group("file")),
        shmem_rss_kb=_int(match.group("shmem")),
        uid=_int(match.group("uid") or match.group("uid_old")),
        pgtables_kb=_int(match.group("pgt")),
        oom_score_adj=_int(match.group("adj")),
    )
    return match.group("msg"), victim


def parse_kill_select(message: str) -> tuple[str | None, int, str, int] | None:
    """≤5.0 `<msg>: Kill process N (comm) score S or sacrifice child` (2.6: `or a child`,
    `and children.`)."""
    match = _KILL_SELECT.match(message)
    if match is None:
        return None
    return (
        match.group("msg"),
        int(match.group("pid")),
        match.group("comm"),
        int(match.group("score")),
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
