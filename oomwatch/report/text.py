"""The human report, every untrusted string escaped.

One incident prints in full: the verdict (one sentence), the findings and the advice, the
breakdown, the largest tasks and the timeline; then the facts they rest on (identity,
victims, limit, invoker), what the decoder noted and what is unknown.  Several start with a
summary table, one row per workload, container and verdict; up to `FULL_UPTO` then print in
full, more print the findings of the most actionable rows and leave the rest to `--details`,
so 300 kills read in one screen instead of 10,000 lines.

Process names, cgroup paths and pod names come from whoever runs the workload; each goes
through `escape_control` so a name cannot move the cursor, clear the screen or fake a line.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from oomwatch.diagnosis import unknowns
from oomwatch.incident import Incident
from oomwatch.report import facts, summary
from oomwatch.report.facts import Table, kind_words
from oomwatch.sanitize import escape_control as esc

__all__ = ["kind_words", "render", "render_incident"]

FULL_UPTO = 3  # more incidents than this: summary and top findings unless --details
TOP_ROWS = 3  # rows of the summary whose findings are printed (the first: most actionable)
MAX_FINDINGS = 6
MAX_WARNINGS = 10
MAX_ALSO = 4  # more killed processes (a group kill) are listed on one line, then counted
_LABEL = 10


def _row(label: str, text: str) -> str:
    return f"  {label:<{_LABEL}} {esc(text)}"


def _wrapped(prefix: str, text: str, width: int | None) -> list[str]:
    """`prefix` + `text`, wrapped to the terminal's `width` under its own first column (None:
    one line, for a pipe or a file, where a reader greps)."""
    line = prefix + esc(text)
    if width is None or len(line) <= width:
        return [line]
    return textwrap.wrap(
        esc(text),
        max(width, len(prefix) + 20),
        initial_indent=prefix,
        subsequent_indent=" " * len(prefix),
        break_on_hyphens=False,
    )


def _also(members: Table) -> str:
    """The other processes of a group kill, on one line."""
    shown = [
        f"{name} (pid {pid})" + (f" rss {rss}" if rss != "?" else "")
        for pid, rss, name in members.rows[:MAX_ALSO]
    ]
    more = len(members.rows) - MAX_ALSO
    tail = f", … {more} more" if more > 0 else ""
    return f"{len(members.rows)} more: " + ", ".join(shown) + tail


def _table(table: Table, indent: str = "    ") -> list[str]:
    """A table with right-aligned numbers and a left-aligned last column."""
    cells = [tuple(esc(c) for c in row) for row in table.rows]
    widths = [max(len(r[n]) for r in [table.columns, *cells]) for n in range(len(table.columns))]
    lines = []
    for row in [table.columns, *cells]:
        parts = [c.rjust(w) for c, w in zip(row[:-1], widths, strict=False)] + [row[-1]]
        lines.append(indent + " ".join(parts))
    return lines


def _findings(incident: Incident, indent: str) -> list[str]:
    shown = incident.findings[:MAX_FINDINGS]
    lines = [f"{indent}[{f.severity}] {f.code}: {esc(f.message)}" for f in shown]
    if len(incident.findings) > MAX_FINDINGS:
        lines.append(f"{indent}… {len(incident.findings) - MAX_FINDINGS} more (see --json)")
    return lines


def render_incident(incident: Incident, index: int, total: int, width: int | None = None) -> str:
    when = esc(facts.when(incident))
    out = [f"== OOM {index} of {total}: {facts.headline_kind(incident)}, {when} =="]
    out.append(_row("VERDICT", incident.verdict or "?"))
    if incident.findings:
        out.append("  findings:")
        out.extend(_findings(incident, "    "))
    for label, text in facts.advice(incident):
        out.extend(_wrapped(f"  {label:<{_LABEL}} ", text, width))
    if (breakdown := facts.breakdown(incident)) is not None:
        out.append(_row("breakdown", breakdown))
    if (tasks := facts.tasks(incident)) is not None:
        out.append(f"  {tasks.title}:")
        out.extend(_table(tasks))
    if (timeline := facts.timeline(incident)) is not None:
        out.append(_row("timeline", timeline))
    members = facts.members(incident)
    for label, text in facts.facts(incident):
        out.append(_row(label, text))
        if label == "victim" and members is not None:
            out.append(f"  {'also':<{_LABEL}} {esc(_also(members))}")
    if incident.notes:
        out.append("  decoder notes:")
        out.extend(f"    - {esc(note)}" for note in incident.notes[: facts.MAX_NOTES])
        if len(incident.notes) > facts.MAX_NOTES:
            out.append(f"    - … {len(incident.notes) - facts.MAX_NOTES} more (see --json)")
    missing = unknowns(incident)
    if missing:
        out.append("  unknown:")
        out.extend(f"    - {m}" for m in missing)
    return "\n".join(out)


def summary_table(incidents: Sequence[Incident]) -> list[str]:
    """The summary: one line per row of `summary.rows`, at most summary.TABLE_COLUMNS wide."""
    cells = [summary.COLUMNS, *(tuple(esc(c) for c in r.cells) for r in summary.rows(incidents))]
    widths = summary.widths(cells)
    right = {0, 2}  # numbers
    lines = []
    for row in cells:
        parts = [
            summary.fit(cell, width).rjust(width)
            if n in right
            else summary.fit(cell, width).ljust(width)
            for n, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append((" " * summary.INDENT + (" " * summary.GAP).join(parts)).rstrip())
    return lines


def _top(incidents: Sequence[Incident], width: int | None = None) -> list[str]:
    """Verdict, findings and advice of the first summary rows (the most actionable), each
    from the row's most actionable incident."""
    table = summary.rows(incidents)
    top = summary.top(table, TOP_ROWS)
    which = "the first row" if len(top) == 1 else f"the first {len(top)} rows"
    out = [f"Findings of {which} (of {len(table)}, the most actionable first):"]
    for row in top:
        incident = incidents[row.shown - 1]
        count = row.count
        since = f", {row.cells[1]} to {row.last_time}" if row.last_time else ""
        out.append(f"  #{row.numbers[0]} ({count}{since}): {esc(incident.verdict or '?')}")
        out.extend(_findings(incident, "      "))
        for label, text in facts.advice(incident):
            out.extend(_wrapped(f"      {label}: ", text, width))
    return out


def _warnings(warnings: Sequence[str]) -> str:
    lines = [f"  - {esc(w)}" for w in warnings[:MAX_WARNINGS]]
    if len(warnings) > MAX_WARNINGS:
        lines.append(f"  - … {len(warnings) - MAX_WARNINGS} more (see --json)")
    return "warnings:\n" + "\n".join(lines)


def render(
    incidents: Sequence[Incident],
    warnings: Sequence[str],
    source: str,
    *,
    notice: Sequence[str] = (),
    details: bool = False,
    width: int | None = None,
) -> str:
    """The report; `notice` (what a filter or the decoder could not match, first line a
    sentence) stands in for "No OOM kills found" when nothing is shown.  `width`: the
    terminal's, to wrap the advice to (None: not wrapped)."""
    total = len(incidents)
    if not incidents:
        empty = f"No OOM kills found in {esc(source)}."
        blocks = ["\n".join(esc(line) for line in notice) if notice else empty]
    else:
        when = summary.span(incidents)
        head = f"{total} OOM incident{'s' if total > 1 else ''} in {esc(source)}"
        blocks = [head + (f", {esc(when)}" if when and total > 1 else "") + ":"]
        if notice:
            blocks.append("\n".join(esc(line) for line in notice))
        if total > 1:
            blocks.append("\n".join(summary_table(incidents)))
        if details or total <= FULL_UPTO:
            blocks.extend(render_incident(i, n, total, width) for n, i in enumerate(incidents, 1))
        else:
            blocks.append("\n".join(_top(incidents, width)))
            blocks.append(
                f"Each incident in full: --details ({total} blocks); the newest: --last 1."
            )
    if warnings:
        blocks.append(_warnings(warnings))
    return "\n\n".join(blocks) + "\n"
