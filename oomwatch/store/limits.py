"""What the incident store holds at most, and what it does with a database it cannot use.

A pod decides how many processes its container runs, and so how long the kernel's task table
is (a 20,000-row table stored whole would be 4.3 MB per incident).  Before an incident is stored its
task table keeps the victims' rows and the largest others, its undecoded notes are capped,
and an incident still over `MAX_INCIDENT_BYTES` loses its memory timeline's older samples; a
note says what was left out.  The in-memory incident that the sinks see is not changed.

A database that is corrupt or from a newer oomwatch is renamed aside (the newest few are
kept for a person to look at) so the agent starts on a fresh one instead of exiting, which
on a DaemonSet is a crash loop on every such node.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from oomwatch.incident import Incident, TaskRow, Timeline, Victim

MAX_TASK_ROWS = 256
MAX_VICTIMS = 256  # a group kill keeps its first victim and the largest others
MAX_NOTES = 100
MAX_NOTE_CHARS = 512
MAX_INCIDENT_BYTES = 256 * 1024
MAX_DB_BYTES = 256 << 20
KEEP_ASIDE = 3  # set-aside databases kept; older ones are deleted


def incident_json(incident: Incident) -> str:
    return json.dumps(incident.to_dict(), ensure_ascii=False, separators=(",", ":"))


def capped(incident: Incident) -> Incident:
    """The incident with its task table, victims and notes capped (itself when nothing is
    over)."""
    if (
        len(incident.tasks) <= MAX_TASK_ROWS
        and len(incident.victims) <= MAX_VICTIMS
        and len(incident.notes) <= MAX_NOTES
        and all(len(n) <= MAX_NOTE_CHARS for n in incident.notes)
    ):
        return incident
    notes = [n[:MAX_NOTE_CHARS] for n in incident.notes[:MAX_NOTES]]
    if len(incident.notes) > MAX_NOTES:
        notes.append(f"oomwatch: {len(incident.notes) - MAX_NOTES} more notes not stored")
    tasks = incident.tasks
    if len(tasks) > MAX_TASK_ROWS:
        tasks = largest_tasks(incident, MAX_TASK_ROWS)
        notes.append(
            f"oomwatch: task table of {len(incident.tasks)} rows stored as the victims' rows and"
            f" the largest by rss ({len(tasks)} rows)"
        )
    victims, omitted = incident.victims, incident.victims_omitted
    if len(victims) > MAX_VICTIMS:
        victims = largest_victims(victims, MAX_VICTIMS)
        omitted += len(incident.victims) - len(victims)
    return replace(incident, tasks=tasks, notes=notes, victims=victims, victims_omitted=omitted)


def bounded(incident: Incident) -> tuple[Incident, str]:
    """The incident as stored and that JSON: `capped`, then, while its JSON is over
    MAX_INCIDENT_BYTES, cut part by part (the timeline's older samples, the allocator
    state, then tables, notes and findings to a few rows each), each cut noted."""
    incident = capped(incident)
    data = incident_json(incident)
    for cut in _CUTS:
        if len(data.encode()) <= MAX_INCIDENT_BYTES:
            break
        smaller = cut(incident)
        if smaller is not None:
            incident = smaller
            data = incident_json(incident)
    return incident, data


def _cut_timeline(incident: Incident) -> Incident | None:
    if incident.timeline is None or len(incident.timeline.samples) <= 60:
        return None
    timeline: Timeline = replace(incident.timeline, samples=incident.timeline.samples[-60:])
    notes = [*incident.notes, "oomwatch: memory timeline cut to its last 60 samples"]
    return replace(incident, timeline=timeline, notes=notes)


def _cut_allocator(incident: Incident) -> Incident | None:
    if incident.allocator is None:
        return None
    notes = [*incident.notes, "oomwatch: allocator state not stored (over the size cap)"]
    return replace(incident, allocator=None, notes=notes)


def _cut_rows(incident: Incident) -> Incident:
    few = 16
    victims = largest_victims(incident.victims, few)
    omitted = incident.victims_omitted + len(incident.victims) - len(victims)
    ours = [n for n in incident.notes[few:] if n.startswith("oomwatch: ")][-few:]
    notes = [n[:128] for n in incident.notes[:few]] + ours
    notes.append("oomwatch: tables, notes and findings cut to a few rows (over the size cap)")
    return replace(
        incident,
        tasks=largest_tasks(incident, few),
        victims=victims,
        victims_omitted=omitted,
        notes=notes,
        findings=[replace(f, evidence={}) for f in incident.findings[:few]],
        memcg_stats=None,
        timeline=None,
    )


_CUTS = (_cut_timeline, _cut_allocator, _cut_rows)


def largest_victims(victims: list[Victim], limit: int) -> list[Victim]:
    """The first victim (the kernel's choice) and the largest others by anon rss, in the
    kernel's order."""
    ranked = sorted(range(1, len(victims)), key=lambda i: -(victims[i].anon_rss_bytes or 0))
    return [victims[0], *(victims[i] for i in sorted(ranked[: limit - 1]))] if victims else []


def largest_tasks(incident: Incident, limit: int) -> list[TaskRow]:
    """The victims' rows, then the largest others by rss, in the kernel's order."""
    victims = {v.pid for v in incident.victims}
    ranked = sorted(
        range(len(incident.tasks)),
        key=lambda i: (incident.tasks[i].pid not in victims, -(incident.tasks[i].rss_pages or 0)),
    )
    return [incident.tasks[i] for i in sorted(ranked[:limit])]


def move_aside(db_path: Path, reason: str) -> Path:
    """Rename the database (and its WAL files) to `<name>.<reason>-<UTC time>`; keep the
    newest KEEP_ASIDE such copies for each reason (a corrupt one never pushes out a newer
    agent's store, which that agent takes back: store_upgrade).  Returns the new name."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = db_path.with_name(f"{db_path.name}.{reason}-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{db_path}{suffix}")
        if source.exists():
            os.replace(source, Path(f"{aside}{suffix}"))
    from oomwatch.store.upgrade import set_aside  # sqlite3: not for `oomwatch report FILE`

    older = sorted(set_aside(db_path, reason), key=lambda p: p.stat().st_mtime)
    for old in older[:-KEEP_ASIDE]:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{old}{suffix}").unlink(missing_ok=True)
    return aside
