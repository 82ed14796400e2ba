"""Kernel log records tests build: a memory.oom.group kill of any size, as /dev/kmsg
prints it."""

from __future__ import annotations

GROUP = "/kubepods.slice/kubepods-pod0.slice/cri-containerd-c0ffee.scope"
TAIL = "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:84kB oom_score_adj:0"


def group_kill(members: int) -> list[bytes]:
    """A memory.oom.group kill of `members` processes as /dev/kmsg prints it (the primary
    victim again as a member, as the kernel does)."""
    kill = "Memory cgroup out of memory: Killed process {pid} (w{pid}) total-vm:21104kB,"
    records = [
        f"6,1,100,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
        f"mems_allowed=0,oom_memcg={GROUP},task_memcg={GROUP},task=w2,pid=2,uid=1000",
        f"3,2,101,-;{kill.format(pid=2)} anon-rss:1kB, {TAIL}",
        f"6,3,102,-;Tasks in {GROUP} are going to be killed due to memory.oom.group set",
    ]
    for i in range(members):
        pid = 2 + i
        records.append(f"3,{4 + i},{103 + i},-;{kill.format(pid=pid)} anon-rss:{pid}kB, {TAIL}")
    return [r.encode() for r in records]
