"""The daemon's checkpoint: when it is saved, and the reconciliation a restart resumes.

It is saved in one transaction with the kmsg cursor and the counter levels, so the three
agree: every kill counted up to the levels is either stored (its record before the cursor),
owed (counted, its record not read yet) or a stored report still waiting for its counter.
Restoring the owed and waiting kills keeps a restart from recording a kill twice (a counter
increase whose record was already stored) or never (an owed kill whose record is lost).
Waiting bare kills are never saved: the cursor is not saved past them, so they replay.
Times are CLOCK_MONOTONIC, so a checkpoint is only restored on the boot that wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from oomwatch.cgroups.counters import OomCounters
from oomwatch.reconcile import GRACE_S, Claim, ReconcileState, Rise, Sighting
from oomwatch.sources.kmsg import KmsgCursor
from oomwatch.stages import EventLogger
from oomwatch.store import Checkpoint, IncidentStore


def pending_reconcile(state: ReconcileState) -> dict[str, Any]:
    """The JSON-ready part of the state a restart needs (bare kills and OOM notifications
    excluded: bare kills replay, and notifications are watched anew from the restart)."""
    return {
        "claims": [
            [list(c.cgroups), c.kernel_time_s, c.expires_at_s, c.last_kernel_time_s]
            for c in state.claims
        ],
        "rises": [[r.cgroup, r.after_s, r.by_s, r.due_s, r.group] for r in state.rises],
        "sightings": [[s.pid, s.cgroup, s.at_s] for s in state.sightings],
        "kernel_offset_s": state.kernel_offset_s,
    }


def restore_reconcile(data: Mapping[str, Any], now_s: float) -> ReconcileState:
    """The saved state, with deadlines moved to at least one grace period from now so the
    replayed kernel log and the first counter reads can explain what was pending.

    Checkpoints of earlier versions (`unmatched` report kills, `owed` counts, `known_pids`)
    are read too.  Raises ValueError naming the part that is malformed.
    """
    soon = now_s + GRACE_S
    try:
        # restored claims arrive now: they take part once the restarted agent read counters
        claims = [  # [cgroups, at, expires, last kill line (absent before)]
            Claim(
                tuple(str(c) for c in cgroups),
                _opt_float(at),
                max(float(expires), soon),
                now_s,
                _opt_float(last[0]) if last else None,
            )
            for cgroups, at, expires, *last in data.get("claims", ())
        ]
        claims += [  # before attribution: one report kill per row
            Claim((str(cgroup),), _opt_float(at), max(float(expires), soon), now_s)
            for cgroup, at, expires in data.get("unmatched", ())
        ]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint 'claims' is malformed: {exc}") from exc
    try:
        rises = [
            Rise(str(c), _opt_float(after), float(by), max(float(due), soon), bool(group))
            for c, after, by, due, group in data.get("rises", ())
        ]
        for c, count, group_kills, seen, due in data.get("owed", ()):  # before attribution
            rises += [
                Rise(str(c), None, float(seen), max(float(due), soon), i < int(group_kills))
                for i in range(int(count))
            ]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint 'rises' is malformed: {exc}") from exc
    try:
        sightings = tuple(
            Sighting(int(pid), str(cgroup), float(at))
            for pid, cgroup, at in data.get("sightings", ())
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint 'sightings' is malformed: {exc}") from exc
    try:
        offset = _opt_float(data.get("kernel_offset_s"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint 'kernel_offset_s' is malformed: {exc}") from exc
    return ReconcileState(tuple(claims), tuple(rises), sightings=sightings, kernel_offset_s=offset)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


class Checkpointer:
    """Loads the checkpoint of this boot, and saves a new one whenever something changed."""

    def __init__(self, store: IncidentStore, boot_id: str | None, log: EventLogger) -> None:
        self._store = store
        self._boot_id = boot_id
        self._log = log
        self._saved_cursor: KmsgCursor | None = None
        self._saved_state: ReconcileState | None = None
        self._levels_batch: int | None = None  # counter batches the saved levels explain

    def load(self) -> Checkpoint | None:
        if self._boot_id is None:
            return None
        try:
            return self._store.load_checkpoint(self._boot_id)
        except Exception as exc:
            self._log.error("checkpoint_unreadable", path=str(self._store.path), error=str(exc))
            return None

    def levels_due(self, batches: int) -> bool:
        """Whether counter levels must be saved: never saved, or deltas came since."""
        return self._boot_id is not None and self._levels_batch != batches

    def save(
        self,
        cursor: KmsgCursor | None,
        state: ReconcileState,
        levels: tuple[Mapping[str, OomCounters], int] | None,
    ) -> None:
        """Save what changed; `levels` are the counters and the batch count they explain,
        which every batch up to it must have gone through the pipeline into `state`."""
        # only what `pending_reconcile` keeps: the rest changes without needing a save
        state = replace(state, bare=(), signals=(), counted_at_s=None)
        if levels is None and cursor == self._saved_cursor and state == self._saved_state:
            return
        try:
            if self._boot_id is None:  # counters cannot be tied to a boot: the cursor alone
                if cursor is not None:
                    self._store.save_cursor(cursor)
            else:  # the pending state (up to thousands of known pids) only when it changed
                counters = levels[0] if levels is not None else None
                pending = None if state == self._saved_state else pending_reconcile(state)
                self._store.save_checkpoint(self._boot_id, cursor, counters, pending)
        except Exception:
            self._log.exception("checkpoint_save_failed")
            return
        self._saved_cursor, self._saved_state = cursor, state
        if levels is not None:
            self._levels_batch = levels[1]
