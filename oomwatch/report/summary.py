"""The summary a report with many incidents starts with: one row per kind of kill (time,
pod/cgroup, victim, kind, limit, dominant consumer, verdict code), so 300 kills of one
crash-looping container are one row that says `×300`, and the largest groups first
in the findings that follow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oomwatch.diagnosis.evidence import fmt_bytes, limit_bytes, pct
from oomwatch.diagnosis.verdict import dominant_part, short_where
from oomwatch.incident import Incident

COLUMNS = ("#", "time", "kills", "pod / cgroup", "victim", "kind", "limit", "dominant", "verdict")
# The widest a cell may be in the text table (longer ones end in "…"); when the table would
# still be wider than TABLE_COLUMNS, the pod/cgroup and victim cells give way (see `widths`).
MAX_WIDTHS = (5, 14, 5, 26, 22, 9, 8, 12, 22)
MIN_WIDTHS = {3: 12, 4: 10}  # pod / cgroup, victim
TABLE_COLUMNS = 120
INDENT, GAP = 2, 2


@dataclass(frozen=True, slots=True)
class Row:
    """One kind of kill: the incidents (1-based numbers) that share every cell but time."""

    numbers: tuple[int, ...]
    cells: tuple[str, ...]  # one per COLUMNS entry, raw text
    last_time: str  # time of the last incident of the row ("" when one)

    @property
    def count(self) -> str:
        """`×N`, or `1 kill`."""
        return f"×{len(self.numbers)}" if len(self.numbers) > 1 else "1 kill"


def owner(incident: Incident) -> str:
    """The pod/cgroup cell (`short_where`, where an ambiguous kill will name its candidates)."""
    text = short_where(incident)
    return "?" if text == "an unknown cgroup" else text


def dated(incidents: Sequence[Incident]) -> bool:
    """Whether the time cells need the date (the incidents span more than one day)."""
    days = {i.wall_time[:10] for i in incidents if i.wall_time}
    return len(days) > 1


def time_cell(incident: Incident, with_date: bool) -> str:
    """Wall clock to the second (`05-19 18:14:43` when days differ), else seconds after boot."""
    wall = incident.wall_time
    if wall and len(wall) >= 19:
        return wall[5:19].replace("T", " ") if with_date else wall[11:19]
    if incident.kernel_time_s is not None:
        return f"{incident.kernel_time_s:.1f} s"
    return "?"


def victim_cell(incident: Incident, with_pid: bool) -> str:
    victim = incident.victim
    if victim is None:
        return "(no kill)" if not incident.header_suppressed else "?"
    text = f"{victim.comm} ({victim.pid})" if with_pid else victim.comm
    more = incident.victim_count - 1
    return text + (f" +{more}" if more > 0 else "")


def limit_cell(incident: Incident) -> str:
    if incident.kind == "global":
        return "node"
    limit = limit_bytes(incident)
    return fmt_bytes(limit) if limit is not None else "?"


def dominant(incident: Incident) -> tuple[str, str]:
    """(what, cell): what held most of the memory and its share, as the verdict says it
    (`dominant_part`); else the victim's own anon RSS; else unknown."""
    part = dominant_part(incident)
    if part is not None:
        name, size, whole = part
        return name, f"{name} {pct(size, whole)}"
    victim = incident.victim
    if victim is not None and victim.anon_rss_bytes is not None:
        return "rss", f"rss {fmt_bytes(victim.anon_rss_bytes)}"
    return "?", "?"


def _key(incident: Incident) -> tuple[str, ...]:
    victim = incident.victim
    return (
        owner(incident),
        victim.comm if victim else "",
        str(incident.victim_count),
        incident.kind,
        limit_cell(incident),
        dominant(incident)[0],
        incident.verdict_code or "",
    )


def rows(incidents: Sequence[Incident]) -> list[Row]:
    """Incidents grouped by what they share, in order of each group's first incident."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for number, incident in enumerate(incidents, 1):
        groups.setdefault(_key(incident), []).append(number)
    with_date = dated(incidents)
    out = []
    for numbers in groups.values():
        first, last = incidents[numbers[0] - 1], incidents[numbers[-1] - 1]
        many = len(numbers) > 1
        cells = (
            str(numbers[0]),
            time_cell(first, with_date),
            f"×{len(numbers)}" if many else "1",
            owner(first),
            victim_cell(first, with_pid=not many),
            first.kind,
            limit_cell(first),
            dominant(first)[1],
            first.verdict_code or "",
        )
        out.append(Row(tuple(numbers), cells, time_cell(last, with_date) if many else ""))
    return out


def largest(table: Sequence[Row], count: int) -> list[Row]:
    """The rows with the most incidents (ties: the earlier first)."""
    return sorted(table, key=lambda r: (-len(r.numbers), r.numbers[0]))[:count]


def widths(cells: Sequence[Sequence[str]]) -> list[int]:
    """Column widths for these rows (header included): each as wide as its widest cell up to
    MAX_WIDTHS, then the pod/cgroup and victim columns narrowed until TABLE_COLUMNS fit."""
    out = [min(max(len(r[n]) for r in cells), top) for n, top in enumerate(MAX_WIDTHS)]
    excess = INDENT + GAP * (len(out) - 1) + sum(out) - TABLE_COLUMNS
    for n, least in MIN_WIDTHS.items():
        cut = min(max(excess, 0), max(out[n] - least, 0))
        out[n] -= cut
        excess -= cut
    return out


def fit(text: str, width: int) -> str:
    """`text` cut to `width` characters, ending in "…" when cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def span(incidents: Sequence[Incident]) -> str:
    """`from <first> to <last>` (wall clock, else seconds after boot), or "" when undated."""
    stamps = [i.wall_time[:19].replace("T", " ") for i in incidents if i.wall_time]
    if not stamps:
        stamps = [f"{i.kernel_time_s:.1f} s after boot" for i in incidents if i.kernel_time_s]
    if not stamps:
        return ""
    return f"at {stamps[0]}" if len(set(stamps)) == 1 else f"from {stamps[0]} to {stamps[-1]}"
