"""The contract's wall-clock format (`wall_time`, `detected_at`): ISO-8601 in UTC.

Every time an incident carries as text is written and read by these three functions, so the
store, the trends and the filters date one kill alike whatever zone the machine is in.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["iso_epoch_s", "iso_time", "parse_iso"]


def iso_time(epoch_s: float) -> str:
    """The contract's time format (`wall_time`, `detected_at`): ISO-8601 UTC, microseconds."""
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="microseconds")


def parse_iso(text: str) -> datetime | None:
    """An ISO-8601 / RFC 3339 time (`Z` or an offset, or none) as an aware datetime; None if
    malformed.  The one rule for a time without a zone: it is UTC.  Such times come from logs
    that do not say their zone (`dmesg -T`, syslog): reading them in the zone of whatever
    machine runs oomwatch would date one kill differently in the store, the trends and the
    filters (they disagreed by the machine's offset), and UTC is what the agent writes."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def iso_epoch_s(text: str | None) -> float | None:
    """Epoch seconds of an ISO-8601 time (`parse_iso`'s rule); None if absent or malformed."""
    parsed = parse_iso(text) if text else None
    return parsed.timestamp() if parsed is not None else None
