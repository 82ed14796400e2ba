"""Exactly-once accounting of hierarchical v2 kill counters, under any interleaving.

A model kernel counts kills up the hierarchy; kills land between the reads of a pass;
containers appear after startup and are found late by a rescan; containers and pods vanish
with unread kills.  Whatever happens, the kills the book reports add up to the kills the
kernel counted after startup: none lost, none twice.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from oomwatch.cgroup_identity import identify
from oomwatch.cgroups.counters import CounterBook, CounterDelta, OomCounters
from oomwatch.cgroups.discovery import WatchedCgroup

NODE = "/kubepods"
QOS = "/kubepods/burstable"
PODS = [f"{QOS}/pod{n}1111111-2222-3333-4444-555555555555" for n in range(2)]
CONTAINERS = [f"{pod}/{c * 64}" for pod in PODS for c in "ab"]
LATE = [f"{pod}/{c * 64}" for pod in PODS for c in "cd"]  # made after the daemon started
ALL = [NODE, QOS, *PODS, *CONTAINERS, *LATE]
# Where a kill can happen: a container, or a pod cgroup itself (a process outside containers).
KILL_SITES = [*CONTAINERS, *LATE, *PODS]


def _cg(rel: str) -> WatchedCgroup:
    return WatchedCgroup(rel, "/nonexistent" + rel, 2, identify(rel))


class ModelKernel:
    """Hierarchical v2 counters of a small tree; removed cgroups read as gone."""

    def __init__(self) -> None:
        self.kills = dict.fromkeys(ALL, 0)
        self.alive = set(ALL) - set(LATE)
        self.total = 0

    def create(self, rel: str) -> None:
        if rel.rsplit("/", 1)[0] in self.alive and rel not in self.alive and not self.kills[rel]:
            self.alive.add(rel)

    def kill(self, site: str) -> None:
        if site not in self.alive:
            return
        self.total += 1
        for rel in ALL:
            if site == rel or site.startswith(rel + "/"):
                self.kills[rel] += 1

    def remove(self, rel: str) -> None:
        self.alive -= {r for r in self.alive if r == rel or r.startswith(rel + "/")}

    def read(self, rel: str) -> OomCounters | None:
        return OomCounters(oom_kill=self.kills[rel]) if rel in self.alive else None


op = st.one_of(
    st.tuples(st.just("kill"), st.sampled_from(KILL_SITES)),
    st.tuples(st.just("remove"), st.sampled_from([*CONTAINERS, *LATE, *PODS])),
    st.tuples(st.just("create"), st.sampled_from(LATE)),
    st.tuples(st.just("discover"), st.just("")),
    st.tuples(
        st.just("pass"),
        st.sets(st.sampled_from(ALL), min_size=1),
        st.lists(st.tuples(st.integers(0, len(ALL)), st.sampled_from(KILL_SITES)), max_size=3),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=25), st.lists(st.sampled_from(KILL_SITES), max_size=3))
def test_every_counted_kill_is_reported_once(ops: list[Any], before: list[str]) -> None:
    kernel = ModelKernel()
    for site in before:  # kills before the daemon started: a baseline, never reported
        kernel.kill(site)
    already = kernel.total
    book = CounterBook()
    deltas: list[CounterDelta] = []

    def discover() -> None:  # a rescan: what exists and is not watched yet, parents first
        new = [rel for rel in ALL if rel in kernel.alive and rel not in book]
        readings = {rel: OomCounters(oom_kill=kernel.kills[rel]) for rel in new}
        deltas.extend(book.add([_cg(rel) for rel in new], readings, 0.5))

    discover()

    def run_pass(dirty: set[str], mid_pass_kills: list[tuple[int, str]]) -> None:
        readings: dict[str, OomCounters | None] = {}
        for i, rel in enumerate(book.with_descendants(dirty)):
            for at, site in mid_pass_kills:
                if at == i:
                    kernel.kill(site)
            readings[rel] = kernel.read(rel)
        deltas.extend(book.update(readings, 1.0))

    for step in ops:
        if step[0] == "kill":
            kernel.kill(step[1])
        elif step[0] == "remove":
            kernel.remove(step[1])
        elif step[0] == "create":
            kernel.create(step[1])
        elif step[0] == "discover":
            discover()
        else:
            run_pass(step[1], step[2])
    discover()
    run_pass(set(ALL), [])  # the rescan's full read
    reported = sum(d.oom_kill for d in deltas)
    assert reported == kernel.total - already
    for d in deltas:
        assert d.oom_kill >= 0
        if d.vanished:
            assert d.oom_kill == 0
