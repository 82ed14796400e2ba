"""The reconciliation a restart resumes: saved as JSON, restored on the same boot."""

from __future__ import annotations

import json

import pytest

from oomwatch.cgroups.oom_events import OomSignal, Sighting
from oomwatch.daemon.checkpoint import pending_reconcile, restore_reconcile
from oomwatch.incident import Incident
from oomwatch.reconcile import GRACE_S, BareKill, Claim, ReconcileState, Rise

CTR = "/kubepods/burstable/pod1234/aaaa"


def test_pending_state_round_trips_through_json_with_deadlines_re_armed() -> None:
    state = ReconcileState(
        claims=(Claim((CTR,), 10.0, 40.0, 0.0, 10.02), Claim((CTR, CTR + "x"), None, 99.0)),
        rises=(Rise(CTR, 10.5, 11.0, 13.5, True), Rise(CTR, None, 11.0, 60.0)),
        bare=(BareKill(Incident(kind="memcg", header_suppressed=True), 12.0, 14.5),),
        sightings=(Sighting(7, CTR, 9.0),),
        signals=(OomSignal(CTR, 9.0, 9.1),),
        counted_at_s=12.0,
    )
    saved = json.loads(json.dumps(pending_reconcile(state)))
    restored = restore_reconcile(saved, now_s=50.0)
    # a waiting bare kill is never saved: the cursor was not saved past it, it replays;
    # notifications are watched anew by the restarted agent
    assert restored.bare == () and restored.signals == ()
    assert restored.sightings == state.sightings
    # deadlines already past get one grace period: the replay may still explain them
    assert restored.claims == (
        Claim((CTR,), 10.0, 50.0 + GRACE_S, 50.0, 10.02),
        Claim((CTR, CTR + "x"), None, 99.0, 50.0),
    )
    assert restored.rises == (
        Rise(CTR, 10.5, 11.0, 50.0 + GRACE_S, True),
        Rise(CTR, None, 11.0, 60.0),
    )


def test_claims_saved_before_they_had_a_last_kill_line_are_read() -> None:
    restored = restore_reconcile({"claims": [[[CTR], 10.0, 40.0]]}, now_s=12.0)
    assert restored.claims == (Claim((CTR,), 10.0, 40.0, 12.0, None),)


def test_a_checkpoint_from_before_attribution_is_read() -> None:
    """Earlier agents saved owed counts and known pids/names: the owed kills come back as
    rises whose start is unknown, the rest is dropped."""
    old = {
        "unmatched": [[CTR, 10.0, 40.0]],
        "owed": [[CTR, 2, 1, 11.0, 13.5]],
        "known_pids": [[7, CTR]],
        "known_names": [["java", CTR]],
    }
    restored = restore_reconcile(old, now_s=12.0)
    assert restored.claims == (Claim((CTR,), 10.0, 40.0, 12.0),)
    assert restored.rises == (Rise(CTR, None, 11.0, 14.5, True), Rise(CTR, None, 11.0, 14.5))


@pytest.mark.parametrize(
    ("data", "part"),
    [
        ({"owed": [[CTR, "two", 0, 1.0, 2.0]]}, "rises"),
        ({"rises": [[CTR, None]]}, "rises"),
        ({"unmatched": [[CTR]]}, "claims"),
        ({"claims": [[[CTR], "x", 1.0]]}, "claims"),
        ({"sightings": [["x", CTR, 1.0]]}, "sightings"),
    ],
)
def test_malformed_checkpoint_is_a_clear_error_naming_the_part(
    data: dict[str, object], part: str
) -> None:
    with pytest.raises(ValueError, match=part):
        restore_reconcile(data, now_s=1.0)
