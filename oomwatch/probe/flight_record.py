"""One flight-recorder file, decoded: who wrote it, its newest samples and framework OOMs,
and what holding it costs the reader's byte budget.  Pure: bytes in, a record or an error
(RingFormatError, SchemaError) out; `reader.py` decides which files get this far.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.probe.ring import HEADER_BYTES, decode_header, decode_slots
from oomwatch.probe.schema import (
    FrameworkOomEvent,
    ProbeMeta,
    ProbeSample,
    event_from_payload,
    meta_from_payload,
    sample_from_payload,
)

# What one kept sample / event / file costs in memory, as Python objects, at most (measured
# in tests/probe/test_reader_bounds.py with every field at its longest).
SAMPLE_COST_BYTES = 2560
EVENT_COST_BYTES = 4096
RECORD_COST_BYTES = 2048


@dataclass(frozen=True, slots=True)
class FlightRecord:
    """One validated file: who wrote it, its newest samples (oldest first) and framework OOMs.

    `name` is the path below the probe directory (`<pod uid>/<file>` for a per-pod dir).
    """

    name: str
    meta: ProbeMeta
    samples: tuple[ProbeSample, ...]
    events: tuple[FrameworkOomEvent, ...]
    mtime_s: float
    owner_uid: int | None = None  # st_uid: the one thing about the file the pod cannot claim
    pod_dir: str | None = None  # the per-pod directory it was found in, if any


def record_cost(record: FlightRecord) -> int:
    """An upper bound of what holding the record costs (for the reader's byte budget)."""
    return (
        RECORD_COST_BYTES
        + len(record.samples) * SAMPLE_COST_BYTES
        + len(record.events) * EVENT_COST_BYTES
    )


def parse_flight_record(
    name: str,
    data: bytes,
    mtime_s: float,
    owner_uid: int | None = None,
    *,
    keep_samples: int | None = None,
    keep_events: int | None = None,
    pod_dir: str | None = None,
) -> FlightRecord:
    """Decode and validate a whole file image (pure; raises RingFormatError/SchemaError).

    Only the newest `keep_samples` samples and `keep_events` events are parsed (None: all).
    """
    geometry, meta_payload = decode_header(data)
    meta = meta_from_payload(meta_payload)
    first_event = HEADER_BYTES + geometry.sample_slots * geometry.slot_bytes
    slot = geometry.slot_bytes
    samples = tuple(
        sample_from_payload(payload, seq)
        for seq, payload in decode_slots(
            data, HEADER_BYTES, geometry.sample_slots, slot, keep_samples
        )
    )
    events = tuple(
        event_from_payload(payload, seq)
        for seq, payload in decode_slots(data, first_event, geometry.event_slots, slot, keep_events)
    )
    return FlightRecord(
        name=name,
        meta=meta,
        samples=samples,
        events=events,
        mtime_s=mtime_s,
        owner_uid=owner_uid,
        pod_dir=pod_dir,
    )
