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


class Daemon:
    """The watcher's use of a book: rescans (parents first) and passes over dirty cgroups."""

    def __init__(self, kernel: ModelKernel, prior: dict[str, OomCounters] | None = None) -> None:
        self.kernel = kernel
        self.book = CounterBook(prior)
        self.deltas: list[CounterDelta] = []
        self.discover()

    def discover(self) -> None:
        """A rescan: new cgroups read, and (as the watcher does) their watched ancestors and
        those ancestors' watched children."""
        kernel, book = self.kernel, self.book
        new = [rel for rel in ALL if rel in kernel.alive and rel not in book]
        readings = {rel: OomCounters(oom_kill=kernel.kills[rel]) for rel in new}
        ancestors = {
            near: OomCounters(oom_kill=kernel.kills[near])
            for rel in new
            if (parent := book.ancestor_of(rel)) is not None and parent in kernel.alive
            for near in [parent, *book.children_of(parent)]
            if near in kernel.alive
        }
        self.deltas.extend(book.add([_cg(rel) for rel in new], readings, 0.5, ancestors))

    def run_pass(self, dirty: set[str], mid_pass_kills: list[tuple[int, str]]) -> None:
        readings: dict[str, OomCounters | None] = {}
        for i, rel in enumerate(self.book.with_descendants(dirty)):
            for at, site in mid_pass_kills:
                if at == i:
                    self.kernel.kill(site)
            readings[rel] = self.kernel.read(rel)
        self.deltas.extend(self.book.update(readings, 1.0))

    def apply(self, step: Any) -> None:
        if step[0] == "discover":
            self.discover()
        elif step[0] == "pass":
            self.run_pass(step[1], step[2])
        else:
            apply_to_kernel(self.kernel, step)

    def finish(self) -> int:
        """The rescan's full read; returns the kills reported in all."""
        self.discover()
        self.run_pass(set(ALL), [])
        for d in self.deltas:
            assert d.oom_kill >= 0
            if d.vanished:
                assert d.oom_kill == 0
        return sum(d.oom_kill for d in self.deltas)


def apply_to_kernel(kernel: ModelKernel, step: Any) -> None:
    if step[0] == "kill":
        kernel.kill(step[1])
    elif step[0] == "remove":
        kernel.remove(step[1])
    elif step[0] == "create":
        kernel.create(step[1])


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=25), st.lists(st.sampled_from(KILL_SITES), max_size=3))
def test_every_counted_kill_is_reported_once(ops: list[Any], before: list[str]) -> None:
    kernel = ModelKernel()
    for site in before:  # kills before the daemon started: a baseline, never reported
        kernel.kill(site)
    already = kernel.total
    daemon = Daemon(kernel)
    for step in ops:
        daemon.apply(step)
    assert daemon.finish() == kernel.total - already


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=15), st.lists(op, max_size=10), st.lists(op, max_size=15))
def test_a_restart_from_the_checkpoint_reports_kills_counted_while_down_once(
    first: list[Any], down: list[Any], second: list[Any]
) -> None:
    """Levels saved by one run, at any point, are the next run's baselines: kills (and
    cgroups made or removed) while no daemon ran are reported by the second run, and
    nothing the first run reported is reported again."""
    kernel = ModelKernel()
    kernel.kill(CONTAINERS[0])  # before the first start: never news
    already = kernel.total
    run = Daemon(kernel)
    for step in first:
        run.apply(step)
    # a checkpoint at any point: whatever was reported so far, stale parents included
    reported = sum(d.oom_kill for d in run.deltas)
    levels = run.book.levels()
    for step in down:  # the daemon is down: only the kernel moves
        apply_to_kernel(kernel, step)
    rerun = Daemon(kernel, prior=levels)
    for step in second:
        rerun.apply(step)
    assert reported + rerun.finish() == kernel.total - already


def _restart(late_reading: OomCounters, gained: OomCounters) -> list[tuple[str, int]]:
    """A checkpoint of a tree without LATE[0]; while down LATE[0] appears and the pod, QoS and
    node gain `gained`; the restarted book's first deltas."""
    pod, late = PODS[0], LATE[0]
    known = [NODE, QOS, pod, CONTAINERS[0]]
    first = CounterBook()
    first.add([_cg(rel) for rel in known], dict.fromkeys(known, OomCounters()), 0.0)
    readings = {
        **dict.fromkeys((NODE, QOS, pod), gained),
        CONTAINERS[0]: OomCounters(),
        late: late_reading,
    }
    rerun = CounterBook(prior=first.levels())
    deltas = rerun.add([_cg(rel) for rel in [*known, late]], readings, 5.0)
    return [(d.cgroup.relpath, d.oom_kill) for d in deltas]


def test_a_container_made_and_killed_while_the_daemon_was_down_reports_its_own_kills() -> None:
    """Real 6.1 (the v2 storms, kill -9 mid-burst): such kills went to the QoS slice, pod lost."""
    two = OomCounters(2, 2, 0)
    assert _restart(two, gained=two) == [(LATE[0], 2)]


def test_a_new_container_with_more_kills_than_its_ancestors_gained_keeps_them_as_a_baseline() -> (
    None
):
    """Its counters predate the checkpoint (they cannot all be news): the pod reports the
    one kill it gained, as before."""
    assert _restart(OomCounters(3, 3, 0), gained=OomCounters(1, 1, 0)) == [(PODS[0], 1)]


def test_a_container_made_and_killed_between_two_reads_has_its_own_kill() -> None:
    """A new container under a watched pod is found after its kill: the pod's fresh counter
    grew by that kill since it was last read, so the kill is the container's (not left to
    the pod, where it would name no container)."""
    kernel = ModelKernel()
    daemon = Daemon(kernel)
    kernel.create(LATE[0])
    kernel.kill(LATE[0])
    daemon.discover()
    assert [(d.cgroup.relpath, d.oom_kill) for d in daemon.deltas] == [(LATE[0], 1)]
    assert daemon.finish() == 1
