"""Attribution never charges a wrong cgroup, whatever the timing: a simulated kernel.

Hypothesis draws storms of kills in a few cgroups (some with a full report, some with a
report cut short before its kill line, most bare), the
OOM notification before each kill (and the victim's pid seen then, or not), and counter
reads at random moments; the simulation
feeds the reconciler what an agent would have seen (each read dated by the previous read of
that counter) and checks every incident against the truth: `certain` means the true
cgroup, `ambiguous` means the true cgroup is among the candidates, and each kill is
recorded exactly once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hypothesis import example, given, settings
from hypothesis import strategies as st

from oomwatch.cgroups.oom_events import OomSignal, Sighting
from oomwatch.incident import Incident, Victim
from oomwatch.reconcile import (
    CgroupFacts,
    CgroupNews,
    CounterKills,
    KernelTime,
    ReconcileState,
    reconcile,
)

CGROUPS = [f"/kubepods/besteffort/pod{i}/c{i}" for i in range(4)]
UNWATCHED = "/system.slice/not-watched.service"  # its kills print lines; no counter is read


@dataclass(frozen=True)
class Kill:
    t: float
    cgroup: str
    pid: int
    report: int  # BARE, FULL (its kill line read) or CUT (closed before its kill line)
    signal_lag: float  # the notification fired this long before the kill
    seen: bool  # its pid was seen in its cgroup when the notification fired


BARE, FULL, CUT = 0, 1, 2

kills_strategy = st.lists(
    st.tuples(
        st.floats(0.0, 2.0),
        st.integers(0, 4),
        st.sampled_from([BARE, FULL, CUT]),
        st.floats(0.0001, 0.05),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


def _incident(kill: Kill) -> Incident:
    """The incident the decoder makes of the kill's lines: a full report counts its kill
    line (`kills_counted`, its stamp), a cut one names the victim from its summary only."""
    victim = Victim(pid=kill.pid, comm="python3")
    if kill.report == BARE:
        return Incident(
            kind="memcg", kernel_time_s=kill.t, header_suppressed=True, victims=[victim]
        )
    incident = Incident(
        kind="memcg",
        kernel_time_s=kill.t,
        oom_memcg=kill.cgroup,
        task_memcg=kill.cgroup,
        victims=[victim],
    )
    if kill.report == FULL:
        incident.kills_counted = 1
        incident.last_kill_kernel_time_s = kill.t
    return incident


@settings(max_examples=int(os.environ.get("OOMWATCH_PROPERTY_EXAMPLES", "300")), deadline=None)
# A cut report's claim may take any later rise of its cgroup; an unwatched bare kill's
# (ambiguous) claim took the cut report's own rise, and the joint matching then gave a later
# bare kill in that cgroup only the other cgroup whose counter rose with it.
@example(
    raw=[
        (0.428, 1, BARE, 0.001, False),
        (0.0, 4, BARE, 0.001, False),
        (0.4339, 0, BARE, 0.001, False),
        (0.0, 1, CUT, 0.001, False),
    ],
    read_every=0.06102122245714624,
    line_lag=0.006560309871810192,
    with_signals=False,
    clock_late=0.0,
)
@given(
    raw=kills_strategy,
    read_every=st.floats(0.001, 0.5),
    line_lag=st.floats(0.0001, 0.02),
    with_signals=st.booleans(),
    clock_late=st.floats(0.0, 0.5),
)
def test_no_kill_is_ever_charged_to_a_wrong_cgroup(
    raw: list[tuple[float, int, int, float, bool]],
    read_every: float,
    line_lag: float,
    with_signals: bool,
    clock_late: float,
) -> None:
    """`clock_late`: the agent's estimate of the kernel clock's offset errs by up to 500 ms,
    always towards converting kill times late (it takes the promptest record it read);
    past 45 ms the agent knows it reads late (`KernelClock.late_s`, a starved agent)."""
    kills = sorted(
        (
            Kill(t, [*CGROUPS, UNWATCHED][c], 1000 + i, report, lag, seen)
            for i, (t, c, report, lag, seen) in enumerate(raw)
        ),
        key=lambda k: k.t,
    )
    truth = {k.pid: k.cgroup for k in kills}
    facts = CgroupFacts()
    offset = -clock_late
    late = max(0.0, clock_late - 0.045)
    # Events in time order: a signal, then the kill (counter bumped), its line `line_lag`
    # later; counters read every `read_every` and right after each line arrives.
    events: list[tuple[float, int, object]] = []
    for k in kills:
        events.append((k.t - k.signal_lag, 0, k))
        events.append((k.t + line_lag, 1, k))
    t, end = 0.0, kills[-1].t + 1.0
    while t < end:
        events.append((t, 2, None))
        t += read_every
    events.sort(key=lambda e: (e[0], e[1]))
    state = ReconcileState()
    counted = dict.fromkeys(CGROUPS, 0)
    last_read = dict.fromkeys(CGROUPS, -1.0)
    ready: list[Incident] = []
    last_signal_check = -1.0
    n = 0
    while n < len(events):
        when, what, kill = events[n]
        n += 1
        incidents: list[Incident] = []
        news = CgroupNews()
        if what == 0 and with_signals:
            assert isinstance(kill, Kill)
            sightings = [Sighting(kill.pid, kill.cgroup, when + 0.0005)] if kill.seen else []
            news = CgroupNews(
                signals=[OomSignal(kill.cgroup, last_signal_check, when + 0.0005)],
                sightings=sightings,
            )
            last_signal_check = when + 0.0005
        elif what == 1:  # every line that arrived at this moment comes in one read
            assert isinstance(kill, Kill)
            incidents = [_incident(kill)]
            while n < len(events) and events[n][:2] == (when, 1):
                more = events[n][2]
                assert isinstance(more, Kill)
                incidents.append(_incident(more))
                n += 1
        if what in (1, 2):  # a counter pass (after a line, or on the timer)
            rises = []
            read_s = when + 0.0001  # the pass reads after the lines came
            for cgroup in CGROUPS:
                now_count = sum(1 for k in kills if k.cgroup == cgroup and k.t <= read_s)
                if now_count > counted[cgroup]:
                    rises.append(
                        CounterKills(
                            cgroup, now_count - counted[cgroup], read_s, since_s=last_read[cgroup]
                        )
                    )
                    counted[cgroup] = now_count
                last_read[cgroup] = read_s
            r = reconcile(
                state,
                incidents,
                [],
                when,
                facts=facts,
                kernel_time=KernelTime(offset, late, when - line_lag),
            )
            ready += r.ready
            state = r.state
            news = CgroupNews(kills=rises, counted_at_s=when + 0.0001)
            incidents = []
        # the lines of kills up to `line_lag` ago are in: the log was read through then
        r = reconcile(
            state,
            incidents,
            news,
            when + 0.0002,
            facts=facts,
            kernel_time=KernelTime(offset, late, when - line_lag),
        )
        ready += r.ready
        state = r.state
    r = reconcile(
        state, [], [], end + 60.0, facts=facts, kernel_time=KernelTime(offset, late, end + 60.0)
    )
    ready += r.ready
    by_pid: dict[int, Incident] = {}
    for incident in ready:
        assert not incident.kmsg_missing, "every kill's line arrived: nothing counter-only"
        assert incident.victim is not None and incident.victim.pid not in by_pid
        by_pid[incident.victim.pid] = incident
    assert sorted(by_pid) == sorted(truth)
    for pid, incident in by_pid.items():
        attribution = incident.attribution
        assert attribution is not None
        if attribution.confidence == "certain":
            assert incident.task_memcg == truth[pid], (pid, attribution)
        elif truth[pid] == UNWATCHED:  # no counter of its own: unknown, or named with others
            assert attribution.confidence in ("unknown", "ambiguous"), attribution
        else:
            assert attribution.confidence == "ambiguous", attribution
            assert truth[pid] in [c.cgroup for c in attribution.candidates]
