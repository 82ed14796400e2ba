"""Kernel-log text a pod or a paste can shape to make a decoder slow: megabyte lines full of
the anchors the decoder looks for, numbers past 64 bits, long blank runs.  The property tests
(tests/decode/test_properties.py) assert it never raises and reads only what a kernel record
can hold; `bench/fuzz.py hostile` times it."""

from __future__ import annotations

__all__ = ["HUGE_NUMBER_HEADER", "MEGABYTE_LINES", "huge_number_lines"]

MEGABYTE_LINES = (
    "Killed process 1 (" + "(" * (1 << 20),
    "x invoked oom-killer: gfp_mask=0x1(" * 30000,
    "oom-kill:" + ",task=" * 200000 + ",pid=1,uid=0",
    "[ 1.0] [ 1] " + "1 " * 500000,
    "Memory cgroup stats for " + "a:" * 500000,
    "Tasks in " + "/x" * 500000,
)
HUGE_NUMBER_HEADER = "[0.9] a invoked oom-killer: gfp_mask=0x1, order=0, oom_score_adj=0"


def huge_number_lines(digits: int = 5000) -> list[str]:
    """Report lines with numbers of `digits` digits (int() refuses 4300+) and blank runs."""
    big = "9" * digits
    return [
        f"[1.0] Out of memory: Killed process {big} (x) total-vm:1kB",
        f"[1.0] memory: usage {big}kB, limit 1kB, failcnt 1",
        "[1.0] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
        f"[1.0] [ 1] 0 1 {big} 1 4096 0 0 x",
        f"[1.0] oom-kill:constraint=X,nodemask=(null),task=x,pid={big},uid=0",
        f"[1.0] Memory cgroup stats for /x: rss:{big}KB",
        f"[1.0] x invoked oom-killer: gfp_mask=0x1, order={big}, oom_score_adj=0",
        f"[1.0] oom_reaper: reaped process 1 (x), now anon-rss:{big}kB, file-rss:0kB",
        "[1.0] Memory cgroup stats for /x:",
        f"[1.0] anon {big}",
        f"[1.0] Node 0 active_anon:{big}kB",
        f"9,{big},1,-;hello",
        f"[1.0] Out of memory: Kill process 5 (x) score {big} or sacrifice child",
        "[1.0] x" + " " * 16000 + "]",
    ]
