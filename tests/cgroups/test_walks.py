"""Which directories the watcher walks between rescans: new ones once, directories made with
no limit yet again and again until they are kept or their time is up."""

from __future__ import annotations

from oomwatch.cgroups.discovery import Hierarchy
from oomwatch.cgroups.walks import NEW_DIR_RECHECK_EVERY_S, NEW_DIR_RECHECK_S, WalkPlan

V2 = Hierarchy("/nonexistent", 2)


def test_a_new_directory_is_walked_once_and_again_until_it_is_kept() -> None:
    plan = WalkPlan()
    plan.add([(V2, "/lab")])
    assert plan.pending and plan.next_due_s(0.0) is None
    walks = plan.due(0.0)
    assert walks == {(V2, "/lab")} and not plan.pending
    plan.walked(walks, kept=lambda rel: False, now_s=0.0)  # no limit yet
    assert plan.next_due_s(0.0) == NEW_DIR_RECHECK_EVERY_S
    assert plan.due(1.0) == {(V2, "/lab")}
    plan.walked({(V2, "/lab")}, kept=lambda rel: True, now_s=1.0)  # its limit came
    assert plan.due(2.0) == set() and plan.next_due_s(2.0) is None


def test_a_directory_never_kept_stops_being_walked_after_its_time() -> None:
    plan = WalkPlan()
    plan.walked({(V2, "/plain")}, kept=lambda rel: False, now_s=0.0)
    assert plan.due(NEW_DIR_RECHECK_S) == {(V2, "/plain")}
    assert plan.due(NEW_DIR_RECHECK_S + 0.01) == set() and plan.next_due_s(9.0) is None


def test_a_full_rescan_clears_the_walks_but_not_the_rechecks() -> None:
    plan = WalkPlan()
    plan.add([(V2, "/a")])
    plan.walked({(V2, "/b")}, kept=lambda rel: False, now_s=0.0)
    plan.clear()
    assert plan.due(NEW_DIR_RECHECK_EVERY_S) == {(V2, "/b")}


def test_rechecks_come_every_interval_not_at_every_poll() -> None:
    """An OOM's close watch polls every 2 ms: a directory made with no limit is walked
    again each `NEW_DIR_RECHECK_EVERY_S`, not at each of those polls."""
    plan = WalkPlan()
    plan.walked({(V2, "/plain")}, kept=lambda rel: False, now_s=0.0)
    step = NEW_DIR_RECHECK_EVERY_S
    assert plan.due(0.002) == set() and plan.next_due_s(0.002) == step
    assert plan.due(step) == {(V2, "/plain")}
    assert plan.due(step + 0.002) == set() and plan.next_due_s(step + 0.002) == 2 * step
    assert plan.due(2 * step) == {(V2, "/plain")}
