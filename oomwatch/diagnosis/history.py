"""The earlier kills a diagnosis compares with (crash loops), bounded, in one place for the
agent (seeded from its store at startup) and for `oomwatch report` (the input so far).

Only kills of the same workload within the crash-loop window matter (`trends.crash_loop`),
so it keeps the last `per_workload` of each of the last `workloads` workloads.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable

from oomwatch.diagnosis import diagnose
from oomwatch.diagnosis.trends import workload_key
from oomwatch.incident import Incident

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
        earlier.append(incident)
        self._kills.move_to_end(key)
        if len(self._kills) > self._workloads:
            self._kills.popitem(last=False)

    def remember_all(self, incidents: Iterable[Incident]) -> History:
        for incident in incidents:
            self.remember(incident)
        return self
