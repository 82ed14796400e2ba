"""Retry waits after an API outage: exponential, capped, and jittered, so a thousand agents
that failed at the same moment do not come back at the same moment."""

from __future__ import annotations

import random
from collections import Counter

from oomwatch.kube.backoff import Backoff, watch_timeout_s
from oomwatch.kube.publisher import EventPublisher
from oomwatch.kube.watcher import PodWatcher

AGENTS = 1000


def test_each_wait_is_in_the_upper_half_of_a_doubling_capped_step() -> None:
    backoff = Backoff(0.5, 30.0, random.Random(1))
    ceilings = [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    for ceiling in ceilings:
        assert backoff.ceiling_s == ceiling
        assert ceiling / 2 <= backoff.next_s() <= ceiling
    backoff.reset()
    assert backoff.ceiling_s == 0.5 and backoff.next_s() <= 0.5


def _retry_times(agents: int, failures: int) -> list[list[float]]:
    """When each agent retries, all of them having failed together at t=0 and failing again
    at every retry (the API still away); each agent its own random stream, as processes."""
    times = []
    for seed in range(agents):
        backoff = Backoff(0.5, 30.0, random.Random(seed))
        t, mine = 0.0, []
        for _ in range(failures):
            t += backoff.next_s()
            mine.append(t)
        times.append(mine)
    return times


def test_a_thousand_agents_do_not_retry_in_lockstep() -> None:
    times = _retry_times(AGENTS, 10)
    for attempt in range(10):
        at = [agent[attempt] for agent in times]
        # Plain doubling puts all 1000 retries of a step in the same millisecond; jittered,
        # the busiest 10 ms of any step holds a few percent of them.
        busiest = max(Counter(int(t * 100) for t in at).values())
        assert busiest <= 0.06 * AGENTS, (attempt, busiest)
    # At the 30 s cap (attempts 7+) the retries of one step spread over ~15 s: the busiest
    # second gets under a tenth of the agents instead of all of them.
    late = [agent[9] for agent in times]
    assert max(Counter(int(t) for t in late).values()) <= 0.1 * AGENTS
    assert max(late) - min(late) > 30  # the spread grows with the steps


def test_two_agents_draw_different_waits_by_default() -> None:
    a, b = Backoff(0.5, 30.0), Backoff(0.5, 30.0)
    assert [a.next_s() for _ in range(5)] != [b.next_s() for _ in range(5)]


def test_watch_timeouts_spread_like_client_go() -> None:
    rng = random.Random(3)
    timeouts = [watch_timeout_s(300, rng) for _ in range(AGENTS)]
    assert min(timeouts) >= 300 and max(timeouts) < 600
    assert max(Counter(timeouts).values()) <= 0.02 * AGENTS


def test_the_publisher_and_the_pod_watcher_back_off_with_jitter() -> None:
    publisher = EventPublisher(None, None, backoff_initial_s=0.5, backoff_max_s=30.0)  # type: ignore[arg-type]
    watcher = PodWatcher(
        None,  # type: ignore[arg-type]  # no API: only the backoff is drawn
        "node-a",
        None,  # type: ignore[arg-type]
        lambda *_: None,
        backoff_initial_s=0.5,
        backoff_max_s=30.0,
    )
    for backoff in (publisher.backoff, watcher.backoff):
        assert isinstance(backoff, Backoff) and (backoff.initial_s, backoff.max_s) == (0.5, 30.0)
    assert publisher.backoff is not watcher.backoff
