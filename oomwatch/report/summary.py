"""The summary a report with many incidents starts with: one row per workload, container and
verdict code (time, pod/cgroup, victim, kind, limit, dominant consumer, verdict code), so 300
kills of one crash-looping container are one row that says `×300`, and a fragmentation OOM
is never folded into a row of requests too large for the device.

Rows are ranked by what a reader can act on, then by count: the severity of the finding
the verdict names, whether there is advice, how actionable the verdict's code is
(oomwatch.diagnosis.ranking), then the number of incidents; so three "too little evidence"
rows never hide a diagnosed one.  A row shows its most actionable incident (`Row.shown`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oomwatch.diagnosis.evidence import limit_bytes, pct
from oomwatch.diagnosis.ranking import action_rank
from oomwatch.diagnosis.verdict import dominant_part, short_where
from oomwatch.incident import Incident
from oomwatch.units import fmt_bytes

COLUMNS = ("#", "time", "kills", "pod / cgroup", "victim", "kind", "limit", "dominant", "verdict")
# The widest a cell may be in the text table (longer ones end in "…"); when the table would
# still be wider than TABLE_COLUMNS, the pod/cgroup and victim cells give way (see `widths`).
MAX_WIDTHS = (5, 14, 5, 32, 22, 9, 8, 12, 22)
MIN_WIDTHS = {3: 12, 4: 10}  # pod / cgroup, victim
_SEVERITY = {"critical": 0, "warning": 1, "info": 2}
TABLE_COLUMNS = 120
INDENT, GAP = 2, 2


@dataclass(frozen=True, slots=True)
class Row:
    """One kind of kill: the incidents (1-based numbers) that share every cell but time."""

    numbers: tuple[int, ...]
    cells: tuple[str, ...]  # one per COLUMNS entry, raw text (of the `shown` incident)
    last_time: str  # time of the last incident of the row ("" when one)
    shown: int  # the number of the incident whose cells and findings the row shows
    rank: tuple[int, ...]  # smaller first (`rows`)

    @property
    def count(self) -> str:
        """`×N`, or `1 kill`."""
        return f"×{len(self.numbers)}" if len(self.numbers) > 1 else "1 kill"


def owner(incident: Incident) -> str:
    """The pod/cgroup cell (`short_where`, where an ambiguous kill will name its candidates).

    A framework OOM kills no process, so no victim cell tells its containers apart: the
    cell names the container (`pod ml/trainer-0/trainer`), and a probe's unvouched claim
    reads `claimed ml/trainer-0/trainer` (the verdict beside it says `(unverified)`)."""
    text = short_where(incident)
    if text == "an unknown cgroup":
        return "?"
    if incident.kind != "framework" or not (name := container(incident)):
        return text
    if name.startswith("claimed "):
        if not text.startswith("claimed pod "):
            return f"{text} ({name})"
        text = "claimed " + text.removeprefix("claimed pod ").removesuffix(" (unverified)")
        name = name.removeprefix("claimed ")
    return f"{text}/{name}"


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


def workload(incident: Incident) -> str:
    """The API's owner of the pod (`Deployment/web`), else the pod or cgroup cell."""
    ctx = incident.k8s
    if ctx is not None and ctx.owner_kind and ctx.owner_name:
        namespace = f"{ctx.namespace}/" if ctx.namespace else ""
        return f"{namespace}{ctx.owner_kind}/{ctx.owner_name}"
    return owner(incident)


def container(incident: Incident) -> str:
    """The container's name, its id's first 12, or the one a probe file claims."""
    ctx = incident.k8s
    if ctx is not None and ctx.container:
        return ctx.container
    if incident.container_id:
        return incident.container_id[:12]
    claim = (incident.allocator or {}).get("claimed")
    named = claim.get("container") if isinstance(claim, dict) else None
    return f"claimed {named}" if isinstance(named, str) else ""


def _key(incident: Incident) -> tuple[str, ...]:
    return (workload(incident), container(incident), incident.verdict_code or "")


def actionability(incident: Incident) -> tuple[int, int, int]:
    """Smaller is more actionable: the severity of the finding the verdict names, whether
    there is advice, the verdict code's place in ACTION_ORDER."""
    code = incident.verdict_code or ""
    named = next((f for f in incident.findings if f.code == code), None)
    severity = _SEVERITY.get(named.severity, 3) if named is not None else 3
    advised = 0 if (incident.recommendation or {}).get("message") else 1
    return severity, advised, action_rank(code)


def rows(incidents: Sequence[Incident]) -> list[Row]:
    """Incidents grouped by workload, container and verdict code, the most actionable rows
    first, then the largest, then the earliest."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for number, incident in enumerate(incidents, 1):
        groups.setdefault(_key(incident), []).append(number)
    with_date = dated(incidents)
    out = []
    for numbers in groups.values():
        shown = min(
            numbers,
            key=lambda n: (actionability(incidents[n - 1]), -len(incidents[n - 1].findings), n),
        )
        first, last = incidents[shown - 1], incidents[numbers[-1] - 1]
        many = len(numbers) > 1
        pods = {owner(incidents[n - 1]) for n in numbers}
        cells = (
            str(numbers[0]),
            time_cell(incidents[numbers[0] - 1], with_date),
            f"×{len(numbers)}" if many else "1",
            owner(first) + (f" +{len(pods) - 1} pods" if len(pods) > 1 else ""),
            victim_cell(first, with_pid=not many),
            first.kind,
            limit_cell(first),
            dominant(first)[1],
            first.verdict_code or "",
        )
        rank = (*actionability(first), -len(numbers), numbers[0])
        out.append(
            Row(tuple(numbers), cells, time_cell(last, with_date) if many else "", shown, rank)
        )
    return sorted(out, key=lambda r: r.rank)


def top(table: Sequence[Row], count: int) -> list[Row]:
    """The first `count` rows: the most actionable, then the largest (`rows` ranks them)."""
    return sorted(table, key=lambda r: r.rank)[:count]


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
    inferred = sorted({i.year_inferred_from or "" for i in incidents if i.wall_time} - {""})
    if not stamps:
        stamps = [f"{i.kernel_time_s:.1f} s after boot" for i in incidents if i.kernel_time_s]
    if not stamps:
        return ""
    text = f"at {stamps[0]}" if len(set(stamps)) == 1 else f"from {stamps[0]} to {stamps[-1]}"
    if inferred:  # the log did not print the year: say so where the year is shown
        text += f" (year inferred: {', '.join(inferred)})"
    return text
