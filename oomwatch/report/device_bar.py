"""A framework OOM's device memory at the error, drawn from torch's message: one bar of the
device's capacity split into what this process's tensors held (allocated), what the caching
allocator reserved but left unallocated, the rest of this process (CUDA context, non-torch
memory), what other processes held, and what was free; the request beside it.

A framework OOM has no cgroup timeline, and the probe's 1 Hz samples may miss a short run;
the message's numbers are always there.  They come from the workload's file: every value is
type-checked and the bar is drawn only where the capacity is known.
"""

from __future__ import annotations

from html import escape

from oomwatch.diagnosis.device import others_bytes
from oomwatch.incident import Incident
from oomwatch.units import fmt_bytes

WIDTH, HEIGHT = 760, 150
LEFT, RIGHT, BAR_Y, BAR_H = 20, 20, 34, 34
PARTS = (  # (key, words, colour), left to right
    ("allocated", "allocated by tensors", "#4e79a7"),
    ("unallocated", "reserved, unallocated", "#f28e2b"),
    ("process_other", "this process, outside the allocator", "#b07aa1"),
    ("others", "other processes", "#e15759"),
    ("free", "free", "#dddddd"),
)


def _num(alloc: dict[str, object], key: str) -> int | None:
    value = alloc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parts(incident: Incident) -> dict[str, int] | None:
    """Bytes of each of PARTS at the error, or None without the device's capacity and at
    least one of its users' figures."""
    alloc = incident.allocator or {}
    total = _num(alloc, "total_bytes")
    if incident.kind != "framework" or not total:
        return None
    allocated, idle = _num(alloc, "allocated_bytes"), _num(alloc, "reserved_unallocated_bytes")
    process, free = _num(alloc, "process_bytes"), _num(alloc, "free_bytes")
    out = {"allocated": allocated or 0, "unallocated": idle or 0}
    if process is not None:
        out["process_other"] = max(process - (allocated or 0) - (idle or 0), 0)
    out["others"] = others_bytes(alloc) or 0
    out["free"] = free or 0
    if not any(v for k, v in out.items() if k != "free"):
        return None
    return out


def render(incident: Incident, element_id: str) -> str | None:
    """The bar as inline SVG, or None when the message gave too little to draw."""
    sizes = parts(incident)
    if sizes is None:
        return None
    alloc = incident.allocator or {}
    total = _num(alloc, "total_bytes") or 1
    scale = (WIDTH - LEFT - RIGHT) / max(total, sum(sizes.values()))
    out = [
        f'<svg id="{element_id}" class="plot device-bar" xmlns="http://www.w3.org/2000/svg"'
        f' width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img"'
        ' aria-label="device memory at the out-of-memory error">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="{BAR_Y - 10}" font-size="12">device capacity'
        f" {escape(fmt_bytes(total))}</text>",
    ]
    x = float(LEFT)
    legend = []
    for key, words, colour in PARTS:
        size = sizes.get(key)
        if size is None:
            continue
        width = size * scale
        if width > 0:
            out.append(
                f'<rect class="device-part device-{key}" x="{x:.1f}" y="{BAR_Y}"'
                f' width="{width:.1f}" height="{BAR_H}" fill="{colour}"/>'
            )
        x += width
        legend.append((f"{words} {fmt_bytes(size)}", colour))
    requested = _num(alloc, "requested_bytes")
    if requested is not None:
        legend.append((f"requested {fmt_bytes(requested)}", "#000000"))
    for n, (text, colour) in enumerate(legend):
        lx, ly = LEFT + (n % 3) * 245, BAR_Y + BAR_H + 22 + (n // 3) * 18
        out.append(
            f'<rect x="{lx}" y="{ly - 10}" width="10" height="10" fill="{colour}"/>'
            f'<text class="device-legend" x="{lx + 14}" y="{ly}" font-size="11">'
            f"{escape(text)}</text>"
        )
    out.append("</svg>")
    return "".join(out)
