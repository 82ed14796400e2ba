"""The earlier kills a diagnosis compares with (crash loops), bounded, in one place for the
agent (seeded from its store at startup) and for `oomwatch report` (the input so far).

Only kills of the same workload within the crash-loop window matter (`trends.crash_loop`),
so it keeps the last `per_workload` of each of the last `workloads` workloads, and of each
kill only what `crash_loop` reads (its workload and time): a pod decides how many processes
its container runs, and a full incident of 30,000 task rows held 32 times is the agent's
memory limit.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable

from oomwatch.diagnosis import diagnose
from oomwatch.diagnosis.trends import workload_key
from oomwatch.incident import Incident, PodContext, Victim

PER_WORKLOAD = 32
WORKLOADS = 4096


class History:
    """Diagnoses incidents with the earlier kills of their workload, and remembers them."""

    def __init__(self, per_workload: int = PER_WORKLOAD, workloads: int = WORKLOADS) -> None:
        self._per_workload = per_workload
        self._workloads = workloads
        self._kills: OrderedDict[tuple[str, ...], deque[Incident]] = OrderedDict()

    def diagnose(self, incident: Incident) -> Incident:
        """`incident` diagnosed with the earlier kills of its workload (not remembered)."""
        key = workload_key(incident)
        earlier = self._kills.get(key) if key is not None else None
        return diagnose(incident, tuple(earlier) if earlier else ())

    def remember(self, incident: Incident) -> None:
        key = workload_key(incident)
        if key is None:
            return
        earlier = self._kills.get(key)
        if earlier is None:
            earlier = self._kills[key] = deque(maxlen=self._per_workload)
        earlier.append(crash_loop_facts(incident))
        self._kills.move_to_end(key)
        if len(self._kills) > self._workloads:
            self._kills.popitem(last=False)

    def remember_all(self, incidents: Iterable[Incident]) -> History:
        for incident in incidents:
            self.remember(incident)
        return self


def crash_loop_facts(incident: Incident) -> Incident:
    """What `trends.crash_loop` reads of an earlier kill (workload key and time), nothing
    more: a few hundred bytes whatever the kill's task table or victim list."""
    victim = incident.victim
    ctx = incident.k8s
    return Incident(
        kind=incident.kind,
        kernel_time_s=incident.kernel_time_s,
        wall_time=incident.wall_time,
        task_memcg=incident.task_memcg,
        oom_memcg=incident.oom_memcg,
        pod_uid=incident.pod_uid,
        victims=[Victim(pid=victim.pid, comm=victim.comm)] if victim is not None else [],
        k8s=PodContext(container=ctx.container) if ctx is not None else None,
    )
