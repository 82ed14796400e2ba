"""A memory.oom.group kill read in pieces over more than a minute: its counter rises wait for
the pieces, each kill is counted once, and the group once (pure, no kernel needed).

The kernel counts each member in `oom_kill` just before printing its kill line, all in one
call path, so the counters show 20,001 kills at once; a relay starved at nice 19 passed the
lines over 85 s in three pieces (a report closes at a 0.1 s pause), after the rises had
expired: the hostile soak logged 6,608 counter-only kills and 3 group kills for one.
"""

from __future__ import annotations

from support.prometheus import parsed_samples

from oomwatch.incident import Incident, Victim
from oomwatch.reconcile import CgroupNews, CounterKills, KernelTime, ReconcileState, reconcile
from oomwatch.sinks.metrics import Metrics

GROUP = "/kubepods/burstable/pod1234/gggg"
OTHER = "/kubepods/besteffort/pod9999/cccc"  # a kill whose line never comes
MEMBERS = 20_000
T0 = 10.0  # the kernel printed (and counted) every member then


def piece(kills: int, first_pid: int, *, continues: bool) -> Incident:
    """One piece of the group kill as the decoder gives it: the first (with the primary
    victim, whose repeat as a member is counted but not listed) or a continuation."""
    listed = kills - (0 if continues else 1)
    victims = [Victim(pid=first_pid + i, comm="w") for i in range(min(listed, 256))]
    return Incident(
        kind="memcg",
        kernel_time_s=T0 + 0.001,
        oom_memcg=GROUP,
        task_memcg=GROUP,
        group_kill=True,
        group_cgroup=GROUP,
        victims=victims,
        victims_omitted=listed - len(victims),
        kills_counted=kills,
        last_kill_kernel_time_s=T0 + 0.02,
        continues_group_kill_s=T0 + 0.001 if continues else None,
    )


def replay(pieces: dict[float, Incident], open_s: tuple[float, float]) -> list[Incident]:
    """Counter pass and loop turn every second from T0 until 40 s after the last piece; the
    pieces arrive at their times; during `open_s` a piece is open (the log counts as read up
    to its first line's stamp), else the log reads empty (read through now)."""
    rises = (
        CounterKills(GROUP, MEMBERS + 1, T0 + 0.05, oom_group_kill=1, since_s=T0 - 0.1),
        CounterKills(OTHER, 1, T0 + 0.05, since_s=T0 - 0.1),
    )
    first = CgroupNews(kills=rises, counted_at_s=T0 + 0.04)
    state = reconcile(ReconcileState(), [], first, T0 + 0.05, kernel_time=KernelTime()).state
    out: list[Incident] = []
    now = T0 + 1.0
    while now < max(pieces) + 40.0:
        through = T0 - 0.05 if open_s[0] <= now < open_s[1] else now
        arrived = [pieces[now]] if now in pieces else []
        r = reconcile(
            state,
            arrived,
            CgroupNews(counted_at_s=now),
            now,
            kernel_time=KernelTime(read_through_s=through),
        )
        state = r.state
        out += r.ready
        now += 1.0
    assert state.rises == () and state.claims == ()  # every rise explained or reported
    return out


def counter_total(metrics: Metrics, name: str) -> float:
    return sum(value for _, value in parsed_samples(metrics.exposition()).get(name, []))


def test_a_group_kill_read_in_pieces_over_90_s_is_counted_once_and_no_rise_is_invented() -> None:
    """Pieces at 20 s, 45 s and 100 s after the kill (the last open for 55 s of it), as in
    the soak: 13,393 + 349 + 6,259 kill lines = the 20,001 rises."""
    pieces = {
        T0 + 20.0: piece(13_393, 100, continues=False),
        T0 + 45.0: piece(349, 20_000, continues=True),
        T0 + 100.0: piece(6_259, 30_000, continues=True),
    }
    ready = replay(pieces, open_s=(T0 + 45.0, T0 + 100.0))
    counter_only = [i for i in ready if i.kmsg_missing]
    # the kill with no line, beside it in another memcg, is still reported -- and promptly
    assert [i.task_memcg for i in counter_only] == [OTHER]
    assert [i for i in ready if i.group_kill] == list(pieces.values())
    metrics = Metrics()
    for incident in ready:
        metrics.emit(incident)
    assert counter_total(metrics, "oomwatch_group_oom_kills_total") == 1
    assert counter_total(metrics, "oomwatch_oom_kills_total") == MEMBERS + 1  # + the other


def test_a_group_kills_rises_whose_lines_stop_coming_are_counter_only() -> None:
    """The evidence is not swallowed: where the rest of the members never come (records
    overwritten before the relay read them), their rises are counter-only once no piece came
    for `GROUP_PIECE_GAP_S`."""
    ready = replay({T0 + 20.0: piece(13_393, 100, continues=False)}, open_s=(0.0, 0.0))
    missing = [i.task_memcg for i in ready if i.kmsg_missing]
    assert missing.count(GROUP) == MEMBERS + 1 - 13_393 and missing.count(OTHER) == 1
