"""What the incident store holds at most, and what it does with a database it cannot use.

A pod decides how many processes its container runs, and so how long the kernel's task table
is (a 20,000-row table stored 4.3 MB per incident: issue 14).  Before an incident is stored its
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

from oomwatch.incident import Incident, TaskRow, Timeline

MAX_TASK_ROWS = 256
MAX_NOTES = 100
MAX_NOTE_CHARS = 512
MAX_INCIDENT_BYTES = 256 * 1024
MAX_DB_BYTES = 256 << 20
KEEP_ASIDE = 3  # set-aside databases kept; older ones are deleted


def incident_json(incident: Incident) -> str:
    return json.dumps(incident.to_dict(), ensure_ascii=False, separators=(",", ":"))


def capped(incident: Incident) -> Incident:
    """The incident with its task table and notes capped (itself when nothing is over)."""
    if (
        len(incident.tasks) <= MAX_TASK_ROWS
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
    return replace(incident, tasks=tasks, notes=notes)


def bounded(incident: Incident) -> tuple[Incident, str]:
    """The incident as stored (`capped`, and its older timeline samples dropped while its
    JSON is over MAX_INCIDENT_BYTES) and that JSON."""
    incident = capped(incident)
    data = incident_json(incident)
    if len(data.encode()) > MAX_INCIDENT_BYTES and incident.timeline is not None:
        kept = incident.timeline.samples[-60:]
        timeline: Timeline = replace(incident.timeline, samples=kept)
        notes = [*incident.notes, "oomwatch: memory timeline cut to its last 60 samples"]
        incident = replace(incident, timeline=timeline, notes=notes)
        data = incident_json(incident)
    return incident, data


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
    from oomwatch.store_upgrade import set_aside  # sqlite3: not for `oomwatch report FILE`

    older = sorted(set_aside(db_path, reason), key=lambda p: p.stat().st_mtime)
    for old in older[:-KEEP_ASIDE]:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{old}{suffix}").unlink(missing_ok=True)
    return aside
