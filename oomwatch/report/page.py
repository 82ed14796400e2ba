"""`--html FILE`: one self-contained page (no scripts, fonts or links to fetch) that shows what
the text report shows: the summary table first when there are several incidents, then each
incident's verdict, findings and advice, the memory plot, the largest tasks, the processes
killed with it and the facts (limit line included).

Many incidents stay one screen or two: up to `text.FULL_UPTO` are open, more sit closed in
one `<details>` per summary row (the browser's find-in-page still opens them).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from oomwatch.diagnosis import unknowns
from oomwatch.incident import Incident
from oomwatch.report import device_bar, facts, summary, svg
from oomwatch.report.facts import Table
from oomwatch.report.text import FULL_UPTO, TOP_ROWS
from oomwatch.sanitize import escape_control

# Nothing may be fetched: the page is read offline, and a hostile name cannot add a resource.
_CSP = "default-src 'none'; style-src 'unsafe-inline'"
_STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;
background:#fafafa;max-width:1000px;overflow-wrap:anywhere}
h1{font-size:22px;margin:0 0 4px}
.source{color:#666;margin:0 0 16px}
section.incident{background:#fff;border:1px solid #ddd;border-radius:6px;padding:16px;
margin:0 0 24px}
h2{font-size:16px;margin:0 0 10px;color:#555}
h3{font-size:14px;margin:14px 0 6px}
.verdict{font-size:17px;font-weight:600;background:#fff3f3;border-left:5px solid #d62728;
padding:10px 12px;margin:0 0 14px}
.notice{background:#fff8e1;border-left:5px solid #f28e2b;padding:10px 12px;margin:0 0 16px}
.notice pre{white-space:pre-wrap;margin:6px 0}
ul.findings{padding-left:0;list-style:none}
ul.findings li{margin:0 0 8px;padding:6px 10px;border-radius:4px;background:#f4f4f4}
.sev-critical{border-left:4px solid #d62728}.sev-warning{border-left:4px solid #f28e2b}
.sev-info{border-left:4px solid #4e79a7}
code{background:#eee;padding:0 3px;border-radius:3px}
table{border-collapse:collapse;font-size:13px}
table.facts td{padding:2px 10px 2px 0;vertical-align:top}
table.facts td:first-child{color:#666;white-space:nowrap}
table.grid th,table.grid td{padding:3px 8px;border-bottom:1px solid #e4e4e4;text-align:left;
vertical-align:top}
table.grid th{background:#f0f0f0}
table.grid td.num{text-align:right;font-variant-numeric:tabular-nums}
table.summary{background:#fff;margin:0 0 18px;width:100%}
.top{background:#fff;border:1px solid #ddd;border-radius:6px;padding:12px 16px;margin:0 0 18px}
.top h2{margin-bottom:6px}
details.group{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px;
margin:0 0 8px}
details.group>summary{cursor:pointer}
details.incident{margin:8px 0}
.plotnote,.caption{color:#666;font-size:12px;margin:4px 0 12px}
.unknown{color:#8a5300}
"""


def _e(text: object) -> str:
    """Untrusted text -> safe HTML text: control characters shown, markup escaped."""
    return html.escape(escape_control(str(text)))


def _grid(table: Table, css: str = "grid", numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{_e(c)}</td>' if n in numeric else f"<td>{_e(c)}</td>"
            for n, c in enumerate(row)
        )
        + "</tr>"
        for row in table.rows
    )
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _facts(incident: Incident) -> str:
    rows = [("when", facts.when(incident)), ("kind", facts.headline_kind(incident))]
    rows += facts.facts(incident)
    if (breakdown := facts.breakdown(incident)) is not None:
        rows.append(("breakdown", breakdown))
    if (timeline := facts.timeline(incident)) is not None:
        rows.append(("timeline", timeline))
    body = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts">{body}</table>'


def _with_code(text: str) -> str:
    """Escaped text whose backquoted spans (a manifest value to paste) read as code."""
    pieces = _e(text).split("`")
    if len(pieces) % 2 == 0:  # an unpaired quote: plain text
        return "`".join(pieces)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


def _findings(incident: Incident) -> str:
    items = "".join(
        f'<li class="finding sev-{_e(f.severity)}" data-code="{_e(f.code)}">'
        f"<b>{_e(f.code)}</b> ({_e(f.severity)}): {_e(f.message)}</li>"
        for f in incident.findings
    )
    advice = "".join(
        f'<p class="recommendation"><b>Do:</b> {_with_code(text)}</p>'
        if label == "advice"
        else f'<p class="caption">Based on {_e(text)}.</p>'
        for label, text in facts.advice(incident)
    )
    return f'<ul class="findings">{items}</ul>{advice}'


def _body(incident: Incident, n: int) -> str:
    """Everything the text block of one incident shows, in the same order."""
    sampled = incident.timeline is not None and incident.timeline.samples
    plot_title = "Memory before the kill" if sampled else "Memory at the kill"
    if not sampled and (incident.allocator or {}).get("device_samples"):
        plot_title = "Device memory before the out-of-memory error"
    parts = [
        f'<p class="verdict" id="verdict-{n}">{_e(incident.verdict or "?")}</p>',
        _findings(incident),
        f"<h3>{plot_title}</h3>{svg.render(incident, f'timeline-{n}')}",
        f'<p class="caption">{_e(svg.caption(incident))}</p>',
    ]
    if (bar := device_bar.render(incident, f"device-{n}")) is not None:
        parts.append(f"<h3>Device memory at the out-of-memory error</h3>{bar}")
    if (tasks := facts.tasks(incident)) is not None:
        parts.append(f"<h3>{_e(tasks.title.capitalize())}</h3>{_grid(tasks, numeric=(0, 1, 2, 3))}")
    if (members := facts.members(incident)) is not None:
        parts.append(f"<h3>{_e(members.title.capitalize())}</h3>{_grid(members, numeric=(0, 1))}")
    parts.append(f"<h3>Facts</h3>{_facts(incident)}")
    if incident.notes:
        notes = "".join(f"<li>{_e(n)}</li>" for n in incident.notes[: facts.MAX_NOTES])
        parts.append(f"<h3>Decoder notes</h3><ul>{notes}</ul>")
    if missing := unknowns(incident):
        parts.append(
            '<h3>Unknown</h3><ul class="unknown">'
            + "".join(f"<li>{_e(m)}</li>" for m in missing)
            + "</ul>"
        )
    return "".join(parts)


def _section(incident: Incident, n: int, total: int) -> str:
    return (
        f'<section class="incident" id="incident-{n}">'
        f"<h2>OOM {n} of {total}: {_e(facts.headline_kind(incident))}, {_e(facts.when(incident))}"
        f"</h2>{_body(incident, n)}</section>"
    )


def _summary(incidents: Sequence[Incident]) -> str:
    rows = []
    for row in summary.rows(incidents):
        cells = [f'<td class="num"><a href="#incident-{row.numbers[0]}">{row.numbers[0]}</a></td>']
        for n, cell in enumerate(row.cells[1:], 1):
            text = cell + (f" to {row.last_time}" if n == 1 and row.last_time else "")
            cells.append(f'<td class="num">{_e(text)}</td>' if n == 2 else f"<td>{_e(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{_e(c)}</th>" for c in summary.COLUMNS)
    return (
        f'<table class="grid summary" id="summary"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _top(incidents: Sequence[Incident]) -> str:
    table = summary.rows(incidents)
    items = []
    for row in summary.top(table, TOP_ROWS):
        shown = incidents[row.shown - 1]
        count = row.count
        items.append(
            f"<h3>#{row.numbers[0]} ({count})</h3>"
            f'<p class="verdict">{_e(shown.verdict or "?")}</p>'
            f"{_findings(shown)}"
        )
    head = '<section class="top" id="top"><h2>Findings of the first rows (most actionable first)'
    head += "</h2>"
    return f"{head}{''.join(items)}</section>"


def _grouped(incidents: Sequence[Incident]) -> str:
    """Every incident, closed, in one `<details>` per summary row."""
    total, out = len(incidents), []
    for row in summary.rows(incidents):
        first = incidents[row.shown - 1]
        inner = "".join(
            f'<details class="incident" id="incident-{n}"><summary>OOM {n} of {total},'
            f" {_e(facts.when(incidents[n - 1]))}</summary>"
            f'<section class="incident">{_body(incidents[n - 1], n)}</section></details>'
            for n in row.numbers
        )
        count = row.count
        out.append(
            f'<details class="group"><summary>#{row.numbers[0]} ({count}):'
            f" {_e(first.verdict or '?')}</summary>{inner}</details>"
        )
    return "".join(out)


def render(
    incidents: Sequence[Incident],
    warnings: Sequence[str],
    source: str,
    *,
    notice: Sequence[str] = (),
    details: bool = False,
) -> str:
    total = len(incidents)
    parts = []
    if notice:
        rest = "\n".join(notice[1:])
        parts.append(
            f'<div class="notice" id="notice"><p><b>{_e(notice[0])}</b></p>'
            + (f"<pre>{_e(rest)}</pre>" if rest else "")
            + "</div>"
        )
    if not incidents and not notice:
        parts.append('<p class="verdict">No OOM kills found.</p>')
    if total > 1:
        parts.append(_summary(incidents))
    if details or total <= FULL_UPTO:
        parts.extend(_section(i, n, total) for n, i in enumerate(incidents, 1))
    else:
        parts.append(_top(incidents))
        parts.append(f"<h2>All {total} incidents, by summary row</h2>{_grouped(incidents)}")
    if warnings:
        items = "".join(f"<li>{_e(w)}</li>" for w in warnings)
        parts.append(f"<h3>Warnings</h3><ul>{items}</ul>")
    when = summary.span(incidents)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>oomwatch report</title><style>{_STYLE}</style></head><body>"
        "<h1>oomwatch report</h1>"
        f'<p class="source">{total} incident(s) from {_e(source)}'
        f"{', ' + _e(when) if when else ''}</p>"
        f"{''.join(parts)}</body></html>\n"
    )
