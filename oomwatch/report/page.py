"""`--html FILE`: one self-contained page (no scripts, fonts or links to fetch) per report:
the verdict first, then findings, the memory plot before the kill, and the facts.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from oomwatch.diagnosis import unknowns, verdict
from oomwatch.diagnosis.evidence import KIB, fmt_bytes
from oomwatch.incident import Incident
from oomwatch.report import svg
from oomwatch.report.text import kind_words
from oomwatch.sanitize import escape_control

# Nothing may be fetched: the page is read offline, and a hostile name cannot add a resource.
_CSP = "default-src 'none'; style-src 'unsafe-inline'"
_STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;
background:#fafafa;max-width:1000px}
h1{font-size:22px;margin:0 0 4px}
.source{color:#666;margin:0 0 20px}
section.incident{background:#fff;border:1px solid #ddd;border-radius:6px;padding:16px;
margin:0 0 24px}
h2{font-size:16px;margin:0 0 10px;color:#555}
.verdict{font-size:17px;font-weight:600;background:#fff3f3;border-left:5px solid #d62728;
padding:10px 12px;margin:0 0 14px}
ul.findings{padding-left:0;list-style:none}
ul.findings li{margin:0 0 8px;padding:6px 10px;border-radius:4px;background:#f4f4f4}
.sev-critical{border-left:4px solid #d62728}.sev-warning{border-left:4px solid #f28e2b}
.sev-info{border-left:4px solid #4e79a7}
code{background:#eee;padding:0 3px;border-radius:3px}
table.facts{border-collapse:collapse;font-size:13px}
table.facts td{padding:2px 10px 2px 0;vertical-align:top}
.plotnote,.caption{color:#666;font-size:12px;margin:4px 0 12px}
.unknown{color:#8a5300}
"""


def _e(text: object) -> str:
    """Untrusted text -> safe HTML text: control characters shown, markup escaped."""
    return html.escape(escape_control(str(text)))


def _facts(incident: Incident) -> str:
    rows: list[tuple[str, str]] = []
    victim = incident.victim
    if victim is not None:
        rss = [victim.anon_rss_kb, victim.file_rss_kb, victim.shmem_rss_kb]
        rows.append(
            (
                "victim",
                f"{victim.comm} (pid {victim.pid}), anon {fmt_bytes(_kb(rss[0]))}, file"
                f" {fmt_bytes(_kb(rss[1]))}, shmem {fmt_bytes(_kb(rss[2]))}, total-vm"
                f" {fmt_bytes(_kb(victim.total_vm_kb))}",
            )
        )
    attribution = incident.attribution
    if attribution is not None and attribution.confidence != "certain":
        what = attribution.describe() if attribution.candidates else "unknown"
        rows.append(("pod", f"{what} ({attribution.confidence}: {attribution.reason})"))
    for label, value in (
        ("when", incident.wall_time or incident.kernel_time_s),
        ("kind", incident.kind),
        ("limit scope", incident.limit_scope),
        ("cgroup", incident.task_memcg),
        ("oom memcg", incident.oom_memcg),
        ("pod uid", incident.pod_uid),
        ("container", incident.container_id),
        ("qos", incident.qos_class),
    ):
        if value is not None:
            rows.append((label, str(value)))
    parts = incident.breakdown_bytes
    if parts is not None:
        rows.append(
            (
                "breakdown",
                ", ".join(
                    f"{n} {fmt_bytes(getattr(parts, n))}"
                    for n in ("anon", "file", "shmem", "thp", "kernel")
                ),
            )
        )
    body = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<table class="facts">{body}</table>'


def _kb(value: int | None) -> int | None:
    return None if value is None else value * KIB


def _section(incident: Incident, n: int, total: int) -> str:
    findings = "".join(
        f'<li class="finding sev-{_e(f.severity)}" data-code="{_e(f.code)}">'
        f"<b>{_e(f.code)}</b> ({_e(f.severity)}): {_e(f.message)}</li>"
        for f in incident.findings
    )
    rec = incident.recommendation or {}
    todo = (
        f'<p class="recommendation"><b>Do:</b> {_e(rec["message"])}</p>'
        if rec.get("message")
        else ""
    )
    missing = "".join(f"<li>{_e(m)}</li>" for m in unknowns(incident))
    sampled = incident.timeline is not None and incident.timeline.samples
    plot_title = "Memory before the kill" if sampled else "Memory at the kill"
    missing_html = f'<h3>Unknown</h3><ul class="unknown">{missing}</ul>' if missing else ""
    return (
        f'<section class="incident" id="incident-{n}">'
        f"<h2>OOM {n} of {total}: {_e(kind_words(incident.kind))}</h2>"
        f'<p class="verdict" id="verdict-{n}">{_e(verdict(incident))}</p>'
        f'<ul class="findings">{findings}</ul>{todo}'
        f"<h3>{plot_title}</h3>{svg.render(incident, f'timeline-{n}')}"
        f'<p class="caption">{_e(svg.caption(incident))}</p>'
        f"{_facts(incident)}{missing_html}</section>"
    )


def render(incidents: Sequence[Incident], warnings: Sequence[str], source: str) -> str:
    sections = "".join(_section(i, n, len(incidents)) for n, i in enumerate(incidents, 1))
    if not incidents:
        sections = '<p class="verdict">No OOM kills found.</p>'
    warn = "".join(f"<li>{_e(w)}</li>" for w in warnings)
    warn_html = f"<h3>Warnings</h3><ul>{warn}</ul>" if warn else ""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>oomwatch report</title><style>{_STYLE}</style></head><body>"
        "<h1>oomwatch report</h1>"
        f'<p class="source">{len(incidents)} incident(s) from {_e(source)}</p>'
        f"{sections}{warn_html}</body></html>\n"
    )
