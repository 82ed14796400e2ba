"""When the live kernel log calls a report complete: a memory.oom.group kill's report is read
whole although its kill lines come milliseconds apart (the real reports of Debian 6.1 and
6.12 recorded in the lab VM, replayed with the gaps the kernel stamped)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.cgroup_view import V2, FakeCgroupView

from oomwatch.daemon.host import may_kill_group
from oomwatch.decode import parse_kmsg_record
from oomwatch.incident import Incident
from oomwatch.sinks.log import get_logger
from oomwatch.sources.kernel_log import KILL_LINE_IDLE_S, GroupKills, KernelLog

DATA = Path(__file__).resolve().parents[1] / "data" / "kernel-v2"
KERNELS = sorted(p.name for p in DATA.iterdir() if p.is_dir())
POD = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
CTR = f"{POD}/cri-containerd-1.scope"


def replay(path: Path, groups: GroupKills, *, speedup: float = 1.0) -> list[Incident]:
    """Feed the records one by one, each read when the kernel stamped it (`speedup` times
    the gaps), closing the open report wherever the agent's loop would: a prompt reader."""
    kmsg = KernelLog(str(path.parent / "absent"), None, "b", get_logger(), lambda _n: None)
    out: list[Incident] = []
    raws = path.read_bytes().splitlines()
    first = None
    for seq, raw in enumerate(raws):
        record = parse_kmsg_record(raw)
        if record is None or record.kernel_time_s is None:
            continue
        first = record.kernel_time_s if first is None else first
        at_s = (record.kernel_time_s - first) * speedup
        out += kmsg.flush_if_idle(at_s)
        out += kmsg.decode([(seq, raw)], arrival_s=at_s, groups=groups)
    return out + kmsg.flush()


@pytest.mark.parametrize("speedup", [1.0, 5.0])
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_group_kill_read_as_it_is_printed_is_one_incident(kernel: str, speedup: float) -> None:
    """The members' lines came 5-10 ms apart (up to 45 ms at `speedup` 5, a slower console);
    a report closed 5 ms after a kill line split in two, and the primary victim's second kill
    line became a second kill of the pod (6.12 in CI: a second Event)."""
    path = DATA / kernel / "group-kill.kmsg"
    facts = json.loads(path.with_suffix(".json").read_text())["facts"]
    group_at = oom_group_at(facts["container"])
    view = FakeCgroupView(hierarchies=V2, oom_group_for=group_at)
    incidents = replay(path, view, speedup=speedup)
    ours = [i for i in incidents if any(v.pid in facts["members"] for v in i.victims)]
    assert len(ours) == 1, [([v.pid for v in i.victims], i.kills_counted) for i in ours]
    [incident] = ours
    assert incident.group_kill and incident.kills_counted == len(facts["members"]) + 1


def test_a_kill_with_no_group_to_follow_is_closed_at_once() -> None:
    path = DATA / KERNELS[-1] / "single-kill.kmsg"
    calls: list[Incident] = []

    class NoGroup:
        def may_kill_group(self, incident: Incident) -> bool:
            calls.append(incident)
            return False

    kmsg = KernelLog(str(path.parent / "absent"), None, "b", get_logger(), lambda _n: None)
    records = list(enumerate(path.read_bytes().splitlines()))
    assert kmsg.decode(records, arrival_s=100.0, groups=NoGroup()) == []
    assert kmsg.flush_at() == 100.0 + KILL_LINE_IDLE_S and len(calls) == 1
    assert calls[0].task_memcg is not None  # asked with the report's cgroups known


def test_a_kill_with_no_group_to_follow_closes_in_the_read_that_brings_its_kill_line() -> None:
    """v1 (no group kill can follow): the report is whole at its kill line and is recorded
    without waiting for a quiet log; the oom_reaper line in the same read is part of it."""
    path = DATA / KERNELS[-1] / "single-kill.kmsg"
    raws = path.read_bytes().splitlines()
    reaper = b"6,9999,131835000,-;oom_reaper: reaped process 228 (v2-plain), now anon-rss:0kB, "
    reaper += b"file-rss:0kB, shmem-rss:0kB"
    for tail in ([], [reaper]):
        kmsg = KernelLog(str(path.parent / "absent"), None, "b", get_logger(), lambda _n: None)
        records = list(enumerate([*raws, *tail]))
        assert kmsg.decode(records, arrival_s=100.0, groups=FakeCgroupView()) == []
        [incident] = kmsg.flush_if_idle(100.0)  # the same loop turn: no wait
        assert [v.pid for v in incident.victims] == [228]
        assert (incident.victims[0].reaped_anon_rss_bytes == 0) is bool(tail)


def oom_group_at(*groups: str) -> Callable[[str], bool | None]:
    return lambda cgroup: cgroup in groups


@pytest.mark.parametrize(
    ("task", "oom", "groups", "expected"),
    [
        (CTR, CTR, (CTR,), True),  # kubelet >= 1.28 on v2: every container
        (CTR, POD, (POD,), True),  # the pod's limit hit, the group set there
        (CTR, CTR, (POD,), False),  # set above the OOM's cgroup: not this OOM's group
        (CTR, POD, (), False),
        (CTR, None, ("/kubepods.slice",), True),  # a global OOM: up to the root
        (None, None, (CTR,), True),  # header withheld: the cgroup is unknown (v2 node)
    ],
)
def test_may_kill_group_looks_from_the_victim_up_to_the_ooms_cgroup(
    task: str | None, oom: str | None, groups: tuple[str, ...], expected: bool
) -> None:
    incident = Incident(kind="memcg", task_memcg=task, oom_memcg=oom)
    assert may_kill_group(incident, oom_group_at(*groups), cgroup_v2=True) is expected


def test_no_group_kill_follows_on_a_cgroup_v1_node() -> None:
    incident = Incident(kind="memcg")  # header withheld
    assert may_kill_group(incident, oom_group_at(), cgroup_v2=False) is False
