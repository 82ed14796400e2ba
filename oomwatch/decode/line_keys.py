"""Which kernel log lines can matter to the report assembler, tested cheaply.

Most of a log is chatter; these substrings let the assembler (and the scanner that feeds it)
skip a line without parsing it.  What may matter depends on the open report's stage: before
its task table a report also needs the stack's pid line and the global meminfo lines.
"""

from __future__ import annotations

import re

from oomwatch.decode.lazy_re import lazy_compile
from oomwatch.decode.records import LogRecord

# A gap in kernel time this long ends a report: no report's lines are that far apart.
REPORT_GAP_S = 10.0
# Lines that open, place or close a report: a gap in kernel time before one of them ends
# the open report; any other line that far away is another report's, pasted in (ignored).
REPORT_LINES = (
    " invoked oom-killer",
    "Killed process ",
    "ill process ",
    "oom-kill:",
    "memory.oom.group",
    "Task in ",
    "Memory limit reached",
    "memory: usage",
    "Memory cgroup stats for ",
    "callbacks suppressed",
)


# Every line kind that opens a report or comes after its memory info (task table, summary,
# kill, group and reaper lines) holds one of these; before the task table a report also
# needs the stack's pid line and the global meminfo lines.
_KEYS = ("oom", " process ", "emory", "Task")
_PRE_TABLE_KEYS = (
    *_KEYS,
    "swap: ",
    "kmem: ",
    "PID: ",
    "Pid: ",
    "Mem-Info",
    "Node ",
    "_anon:",
    "_file:",
    "kB ",
    " per-cpu:",
)
# Every substring by which any line may matter to the assembler at some stage: a line of
# none of these (and not starting with `[`) is ignored whenever `ignores_keyless()`.
LINE_KEYS = _PRE_TABLE_KEYS
KEY_RE = re.compile("|".join(map(re.escape, _KEYS)))
KILLED_PID = re.compile(r"Killed process \d")
PRE_TABLE_KEY_RE = re.compile("|".join(map(re.escape, _PRE_TABLE_KEYS)))
# The same in a raw /dev/kmsg record (a task row starts right after the `;`).
RAW_KEY_RE = lazy_compile("|".join(map(re.escape, (*_KEYS, ";["))).encode())
RAW_PRE_TABLE_KEY_RE = lazy_compile("|".join(map(re.escape, (*_PRE_TABLE_KEYS, ";["))).encode())


def has_key(message: str, keys: re.Pattern[str]) -> bool:
    """Cheap test: could this line matter? (most chatter fails it)."""
    return message.startswith("[") or keys.search(message) is not None


def dedupe_key(record: LogRecord, message: str) -> tuple[object, ...]:
    """A line as printed once: a terminal paste may repeat it, and it is counted once."""
    return (record.kernel_time_s, record.wall_time, record.kmsg_seq, record.time_text, message)
