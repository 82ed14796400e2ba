"""Pure parsers for the kill lines of a kernel OOM report, every kernel generation.

`Killed process N (comm) ...` (one per victim: a memory.oom.group kill prints thousands) and
the older `Kill process N (comm) score S or sacrifice child`.  As in `oomwatch.decode.lines`
(which re-exports these), every pattern reads the kernel's own fields from where a hostile
name cannot reach, and numbers match at most 20 digits.
"""

from __future__ import annotations

import re
from typing import Any

from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.incident import Victim

_S = re.S  # names may hold newlines (a /dev/kmsg `\x0a` inside a comm)

# The kernel's own `<message>` before a kill line (identical 2.6 -> 6.19, bar 2.6's case).
OOM_MESSAGE = r"(?i:out of memory)(?: \(oom_kill_allocating_task\))?|Memory cgroup out of memory"
# 2.6.32 (RHEL 6) prints `Killed process N, UID U, (comm) ...`, RHEL 7's 3.10 `Killed process
# N (comm), UID U, total-vm:...`; upstream `... (comm) total-vm:... UID:U pgtables:...`.
_KILLED = lazy_compile(
    rf"(?:(?P<msg>{OOM_MESSAGE}): )?Killed process"
    r" (?P<pid>\d{1,20})(?:, UID (?P<uid_old>\d{1,20}),)? \((?P<comm>.*)\)"
    r"(?:, UID (?P<uid_rh7>\d{1,20}),)?"
    r"(?: (?:total-vm|vsz):(?P<vm>\d{1,20})kB)?(?:,\s*anon-rss:(?P<anon>\d{1,20})kB)?"
    r"(?:,\s*file-rss:(?P<file>\d{1,20})kB)?(?:,\s*shmem-rss:(?P<shmem>\d{1,20})kB)?"
    r"(?:,\s*UID:(?P<uid>\d{1,20}))?(?:\s*pgtables:(?P<pgt>\d{1,20})kB)?"
    r"(?:\s*oom_score_adj:(?P<adj>-?\d{1,20}))?\.?\s*$",
    _S,
)
# The kill line as 4.19+ kernels print it, tried first (a group kill has a line per member),
# read in two parts around the name's closing parenthesis: no `)` follows it in this format,
# so it is the line's last, where `_KILLED`'s greedy name ends too (one pattern over the line
# retried its tail at each character of the name: 20,000 instructions a line).  Where both
# parts match, `_KILLED` matches with the same fields (tests/decode/test_kill_line.py).
_KILLED_NOW_HEAD = lazy_compile(
    r"(?:(Memory cgroup out of memory|Out of memory): )?Killed process (\d{1,20}) \((.*)", _S
)
_KILLED_NOW_TAIL = lazy_compile(
    r"\) total-vm:(\d{1,20})kB, anon-rss:(\d{1,20})kB, file-rss:(\d{1,20})kB,"
    r" shmem-rss:(\d{1,20})kB, UID:(\d{1,20}) pgtables:(\d{1,20})kB"
    r" oom_score_adj:(-?\d{1,20})\s*",
    _S,
)


def killed_now(message: str) -> tuple[str | Any, ...] | None:
    """The fields of a 4.19+ kill line (message, pid, comm, total-vm, anon, file, shmem,
    uid, pgtables, oom_score_adj, as printed), or None for any other line."""
    end = message.rfind(")")
    tail = _KILLED_NOW_TAIL.fullmatch(message, end) if end >= 0 else None
    if tail is None:
        return None
    head = _KILLED_NOW_HEAD.fullmatch(message, 0, end)
    if head is None:
        return None
    return head.groups() + tail.groups()


_KILLED_GROUPS = (
    "msg", "pid", "comm", "vm", "anon", "file", "shmem", "uid", "uid_old", "uid_rh7", "pgt", "adj",
)  # fmt: skip
_KILL_SELECT = lazy_compile(
    rf"(?:(?P<msg>{OOM_MESSAGE}): )?[Kk]ill process"
    r" (?P<pid>\d{1,20}) \((?P<comm>.*)\)"
    r" score (?P<score>-?\d{1,20}) (?:or sacrifice child|or a child|and children\.?)\s*$",
    _S,
)


def parse_killed(message: str) -> tuple[str | None, Victim] | None:
    """`[<message>: ]Killed process N (comm) total-vm:...` in every version: (message, victim).

    2.6.18 prints just `Killed process N (comm).`; RHEL 6 and RHEL 7 put the uid elsewhere
    (see `_KILLED`).
    """
    if "Killed process " not in message:
        return None
    fields = killed_now(message)
    if fields is not None:
        return fields[0], victim_now(fields)
    match = _KILLED.match(message)
    if match is None:
        return None
    msg, pid, comm, vm, anon, file, shmem, uid, uid_old, uid_rh7, pgt, adj = match.group(
        *_KILLED_GROUPS
    )
    uid = uid or uid_old or uid_rh7
    victim = Victim(
        pid=int(pid),
        comm=comm,
        total_vm_bytes=None if vm is None else int(vm) * 1024,
        anon_rss_bytes=None if anon is None else int(anon) * 1024,
        file_rss_bytes=None if file is None else int(file) * 1024,
        shmem_rss_bytes=None if shmem is None else int(shmem) * 1024,
        uid=None if uid is None else int(uid),
        pgtables_bytes=None if pgt is None else int(pgt) * 1024,
        oom_score_adj=None if adj is None else int(adj),
    )
    return msg, victim


def victim_now(fields: tuple[str | Any, ...]) -> Victim:
    """The victim of a 4.19+ kill line (`killed_now`'s fields, every one printed).

    Positional and inline: a group kill has a line per member."""
    _, pid, comm, vm, anon, file, shmem, uid, pgt, adj = fields
    return Victim(
        int(pid),
        comm,
        int(vm) * 1024,
        int(anon) * 1024,
        int(file) * 1024,
        int(shmem) * 1024,
        int(uid),
        int(pgt) * 1024,
        int(adj),
    )


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
