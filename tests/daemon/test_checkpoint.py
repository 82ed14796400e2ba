"""The reconciliation a restart resumes: saved as JSON, restored on the same boot."""

from __future__ import annotations

import json

import pytest

from oomwatch.daemon.checkpoint import pending_reconcile, restore_reconcile
from oomwatch.daemon.reconcile import GRACE_S, BareKill, LogKill, OwedKills, ReconcileState
from oomwatch.incident import Incident

CTR = "/kubepods/burstable/pod1234/aaaa"


def test_pending_state_round_trips_through_json_with_deadlines_re_armed() -> None:
    state = ReconcileState(
        unmatched=(LogKill(CTR, 10.0, 40.0), LogKill(CTR, None, 99.0)),
        owed=(OwedKills(CTR, 2, 1, 11.0, 13.5),),
        bare=(BareKill(Incident(kind="memcg", header_suppressed=True), 12.0),),
        known_pids=((7, CTR),),
        known_names=(("java", CTR),),
    )
    saved = json.loads(json.dumps(pending_reconcile(state)))
    restored = restore_reconcile(saved, now_s=50.0)
    # a waiting bare kill is never saved: the cursor was not saved past it, it replays
    assert restored.bare == ()
    assert restored.known_pids == state.known_pids and restored.known_names == state.known_names
    # deadlines already past get one grace period: the replay may still explain them
    assert restored.unmatched == (LogKill(CTR, 10.0, 50.0 + GRACE_S), LogKill(CTR, None, 99.0))
    assert restored.owed == (OwedKills(CTR, 2, 1, 11.0, 50.0 + GRACE_S),)


@pytest.mark.parametrize(
    ("data", "part"),
    [
        ({"owed": [[CTR, "two", 0, 1.0, 2.0]]}, "owed"),
        ({"unmatched": [[CTR]]}, "unmatched"),
        ({"known_pids": [["x", CTR]]}, "known_pids"),
    ],
)
def test_malformed_checkpoint_is_a_clear_error_naming_the_part(
    data: dict[str, object], part: str
) -> None:
    with pytest.raises(ValueError, match=part):
        restore_reconcile(data, now_s=1.0)
