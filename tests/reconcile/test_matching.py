"""The joint matching of kills to counter rises, against brute force: a kill may be given a
rise exactly when some maximum matching gives it that rise (a candidate left out would make
an ambiguous kill's list miss its true cgroup)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from oomwatch.reconcile.attribution import _can_take, maximum_matching


def _in_some_maximum_matching(edges: list[list[int]]) -> set[tuple[int, int]]:
    """Every (kill, rise) pair of every matching of the largest size, by enumeration."""
    pairs = [(i, j) for i, js in enumerate(edges) for j in js]
    best, found = 0, set[tuple[int, int]]()
    for size in range(len(edges), 0, -1):
        for chosen in itertools.combinations(pairs, size):
            kills = {i for i, _ in chosen}
            rises = {j for _, j in chosen}
            if len(kills) == size and len(rises) == size:
                best = size
                found.update(chosen)
        if best:
            return found
    return found


graphs = st.integers(1, 5).flatmap(
    lambda kills: st.integers(1, 4).flatmap(
        lambda rises: st.lists(
            st.lists(st.integers(0, rises - 1), max_size=rises, unique=True),
            min_size=kills,
            max_size=kills,
        )
    )
)


@given(graphs)
def test_a_kill_may_take_a_rise_exactly_when_a_maximum_matching_gives_it(
    edges: list[list[int]],
) -> None:
    owner = maximum_matching(edges)
    assigned = {kill: rise for rise, kill in owner.items()}
    allowed = {
        (i, j)
        for i, js in enumerate(edges)
        for j in js
        if assigned.get(i) == j or _can_take(i, j, edges, dict(owner), assigned)
    }
    assert allowed == _in_some_maximum_matching(edges)


def test_a_freed_rise_lets_an_unmatched_kill_keep_the_matching_maximum() -> None:
    """Two claims of one cgroup (rises 0 and 2 fit the first, 0 the second) and two bare
    kills that fit rise 1 (the other cgroup) and rise 2: either bare kill may take rise 2,
    the other then takes rise 1 and the first claim goes without, as many matched."""
    edges = [[0, 2], [0], [1, 2], [1, 2]]
    owner = maximum_matching(edges)
    assigned = {kill: rise for rise, kill in owner.items()}
    assert all(_can_take(k, 2, edges, dict(owner), assigned) for k in (2, 3))
