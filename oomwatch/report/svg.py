"""The memory plot as inline SVG: stacked anon/THP/shmem/page cache/kernel, usage and limit
lines, the kill, and, when the trainer probe recorded them, the device's memory (CUDA
allocator allocated/reserved, TensorFlow's current bytes) over the same time on its own axis:
GPU memory is not the container's memory, and often ten times as large.

Pure string building with no plotting library, so the page works offline and the daemon
image stays small.  What is plotted comes from `plot_series`, the axes' steps from `ticks`.
"""

from __future__ import annotations

from collections.abc import Sequence

from oomwatch.diagnosis.evidence import limit_bytes, usage_bytes
from oomwatch.incident import Incident
from oomwatch.report.plot_series import (
    LAYER_NAMES,
    Point,
    device_series,
    device_total,
    kill_wall_s,
    point_at_kill,
    timeline_points,
)
from oomwatch.report.ticks import byte_ticks, time_ticks
from oomwatch.units import fmt_bytes

WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 150, 20, 40
# (name, colour) of each layer, drawn bottom-up
LAYERS = tuple(
    zip(LAYER_NAMES, ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#b07aa1"), strict=True)
)
DEVICE_SERIES = (("allocated", "#2ca02c"), ("reserved", "#9467bd"))
DEVICE_AXIS_PX = 62  # room right of the plot for the device axis' ticks


class _Scale:
    """Pixels for seconds and bytes; both axes end on a round tick.  `right`: the plot's
    right edge (narrower when a device axis stands beside it)."""

    def __init__(self, t0: float, top_bytes: float, right: float = WIDTH - RIGHT) -> None:
        self.t0, self.x_ticks = time_ticks(max(-t0, 1.0))
        self.top, self.y_ticks = byte_ticks(max(top_bytes, 1.0))
        self.right = right

    def x(self, t_s: float) -> float:
        return LEFT + (t_s - self.t0) / (0 - self.t0) * (self.right - LEFT)

    def y(self, value: float) -> float:
        return HEIGHT - BOTTOM - value / self.top * (HEIGHT - TOP - BOTTOM)


def _poly(points: Sequence[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def render(incident: Incident, element_id: str) -> str:
    points = timeline_points(incident)
    device = device_series(incident, kill_wall_s(incident))
    has_device = any(device.values())
    if not points:
        if has_device:
            return _render_device_only(incident, device, element_id)
        single = point_at_kill(incident)
        if single is None:
            return (
                f'<p class="noplot" id="{element_id}">No memory numbers in this report:'
                " nothing to plot.</p>"
            )
        return _render_bar(single, element_id)
    values = [p.usage for p in points] + [sum(p.layers) for p in points]
    values += [p.limit for p in points if p.limit]
    t0 = min([points[0].t_s] + [t for s in device.values() for t, _ in s if t <= 0])
    right = WIDTH - RIGHT - (DEVICE_AXIS_PX if has_device else 0)
    scale = _Scale(t0, max(values) * 1.08, right)
    out = _open_svg(element_id, "memory timeline before the kill")
    out += _axes(scale)
    base = [0.0] * len(points)
    for index, (name, colour) in enumerate(LAYERS):
        top = [b + p.layers[index] for b, p in zip(base, points, strict=True)]
        if any(p.layers[index] for p in points):
            upper = [(scale.x(p.t_s), scale.y(v)) for p, v in zip(points, top, strict=True)]
            lower = [(scale.x(p.t_s), scale.y(v)) for p, v in zip(points, base, strict=True)]
            out.append(
                f'<polygon class="layer layer-{name.replace(" ", "-")}" fill="{colour}"'
                f' fill-opacity="0.75" points="{_poly(upper + lower[::-1])}"/>'
            )
        base = top
    usage = [(scale.x(p.t_s), scale.y(p.usage)) for p in points]
    out.append(
        '<polyline class="usage" fill="none" stroke="#222" stroke-width="2"'
        f' points="{_poly(usage)}"/>'
    )
    limits = [(scale.x(p.t_s), scale.y(p.limit)) for p in points if p.limit]
    if limits:
        out.append(
            f'<polyline class="limit" fill="none" stroke="#d62728" stroke-width="2"'
            f' stroke-dasharray="6 4" points="{_poly(limits)}"/>'
        )
    if has_device:
        out += _device_axis(scale, device, device_total(incident), side="right")
    out += _kill_line(scale, "OOM kill")
    out += _legend(points, bool(limits), device)
    out.append("</svg>")
    return "".join(out)


def _render_device_only(
    incident: Incident, device: dict[str, list[tuple[float, float]]], element_id: str
) -> str:
    """A framework OOM: no cgroup was sampled, the device's memory is the whole plot."""
    t0 = min([t for s in device.values() for t, _ in s if t <= 0], default=-1.0)
    scale = _Scale(t0, 1.0)
    out = _open_svg(element_id, "device memory before the out-of-memory error")
    out += _axes(scale, bytes_axis=False)
    out += _device_axis(scale, device, device_total(incident), side="left")
    out += _kill_line(scale, "out of memory")
    out += _legend([], False, device)
    out.append("</svg>")
    return "".join(out)


def _device_axis(
    scale: _Scale,
    device: dict[str, list[tuple[float, float]]],
    total: float | None,
    side: str,
) -> list[str]:
    """The device's memory on its own axis (GPU memory is not the container's memory and
    is often ten times larger): its ticks on `side`, allocated/reserved as lines."""
    values = [v for s in device.values() for t, v in s if scale.t0 <= t <= 0]
    top, ticks = byte_ticks(max([*values, total or 0, 1.0]) * 1.08)

    def y(value: float) -> float:
        return HEIGHT - BOTTOM - value / top * (HEIGHT - TOP - BOTTOM)

    x_axis = scale.right if side == "right" else LEFT
    anchor, dx = ("start", 6) if side == "right" else ("end", -6)
    out = [
        f'<line class="device-axis" x1="{x_axis}" y1="{TOP}" x2="{x_axis}"'
        f' y2="{HEIGHT - BOTTOM}" stroke="#2ca02c"/>'
    ]
    for value, label in ticks:
        out.append(
            f'<text class="tick tick-device" x="{x_axis + dx}" y="{y(value) + 4:.1f}"'
            f' text-anchor="{anchor}" font-size="11" fill="#2ca02c">{label}</text>'
        )
    label_x = x_axis + (DEVICE_AXIS_PX - 10 if side == "right" else -(LEFT - 12))
    out.append(
        f'<text x="{label_x:.0f}" y="{(TOP + HEIGHT - BOTTOM) / 2:.0f}" font-size="11"'
        f' fill="#2ca02c" text-anchor="middle" transform="rotate(-90 {label_x:.0f}'
        f' {(TOP + HEIGHT - BOTTOM) / 2:.0f})">device (GPU) memory</text>'
    )
    if total:
        out.append(
            f'<line class="device-total" x1="{LEFT}" y1="{y(total):.1f}" x2="{scale.right}"'
            f' y2="{y(total):.1f}" stroke="#2ca02c" stroke-width="1.5" stroke-dasharray="2 3"/>'
        )
    for name, colour in DEVICE_SERIES:
        shown = [(scale.x(t), y(v)) for t, v in device[name] if scale.t0 <= t <= 0]
        if len(shown) > 1:
            out.append(
                f'<polyline class="allocator-{name}" fill="none" stroke="{colour}"'
                f' stroke-width="2" points="{_poly(shown)}"/>'
            )
        elif shown:
            ((cx, cy),) = shown
            out.append(
                f'<circle class="allocator-{name}" cx="{cx:.1f}" cy="{cy:.1f}" r="5"'
                f' fill="{colour}" stroke="#fff"/>'
            )
    return out


def _kill_line(scale: _Scale, label: str) -> list[str]:
    kill_x = scale.x(0.0)
    return [
        f'<line class="kill" x1="{kill_x:.1f}" y1="{TOP}" x2="{kill_x:.1f}" y2="{HEIGHT - BOTTOM}"'
        ' stroke="#000" stroke-width="2"/>'
        f'<text x="{kill_x - 4:.1f}" y="{TOP + 12}" text-anchor="end" font-size="12"'
        f' font-weight="bold">{label}</text>'
    ]


def _open_svg(element_id: str, label: str) -> list[str]:
    return [
        f'<svg id="{element_id}" class="plot" xmlns="http://www.w3.org/2000/svg"'
        f' width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img"'
        f' aria-label="{label}">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
    ]


def _render_bar(point: Point, element_id: str) -> str:
    """No timeline was sampled: one stacked bar of what the report printed at the kill."""
    top_value = max([point.usage, sum(point.layers)] + ([point.limit] if point.limit else []))
    scale = _Scale(-1.0, top_value * 1.08)
    out = _open_svg(element_id, "memory at the kill")
    out += _axes(scale, timed=False)
    x0, x1 = scale.x(-0.7), scale.x(-0.3)
    base = 0.0
    for index, (name, colour) in enumerate(LAYERS):
        value = point.layers[index]
        if value:
            y_top, y_base = scale.y(base + value), scale.y(base)
            out.append(
                f'<rect class="layer layer-{name.replace(" ", "-")}" x="{x0:.1f}"'
                f' y="{y_top:.1f}" width="{x1 - x0:.1f}" height="{y_base - y_top:.1f}"'
                f' fill="{colour}" fill-opacity="0.75"/>'
            )
        base += value
    y = scale.y(point.usage)
    out.append(
        f'<line class="usage kill" x1="{x0 - 10:.1f}" y1="{y:.1f}" x2="{x1 + 10:.1f}"'
        f' y2="{y:.1f}" stroke="#222" stroke-width="2"/>'
    )
    if point.limit:
        y = scale.y(point.limit)
        out.append(
            f'<line class="limit" x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}"'
            ' stroke="#d62728" stroke-width="2" stroke-dasharray="6 4"/>'
        )
    out.append(
        f'<text x="{(x0 + x1) / 2:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle"'
        ' font-size="11">at the OOM kill (no timeline was sampled)</text>'
    )
    out += _legend([point], bool(point.limit), {})
    out.append("</svg>")
    return "".join(out)


def _axes(scale: _Scale, *, timed: bool = True, bytes_axis: bool = True) -> list[str]:
    out = [
        f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{scale.right}" y2="{HEIGHT - BOTTOM}"'
        ' stroke="#888"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#888"/>',
    ]
    for value, label in scale.y_ticks if bytes_axis else ():
        y = scale.y(value)
        out.append(
            f'<text class="tick tick-y" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end"'
            f' font-size="11">{label}</text>'
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{scale.right}" y2="{y:.1f}" stroke="#eee"/>'
        )
    if not timed:
        return out
    for t, label in scale.x_ticks:
        out.append(
            f'<text class="tick tick-x" x="{scale.x(t):.1f}" y="{HEIGHT - BOTTOM + 16}"'
            f' text-anchor="middle" font-size="11">{label}</text>'
        )
    out.append(
        f'<text x="{(LEFT + scale.right) / 2:.0f}" y="{HEIGHT - 6}" text-anchor="middle"'
        ' font-size="11">time before the kill</text>'
    )
    return out


def _legend(
    points: Sequence[Point], limit: bool, device: dict[str, list[tuple[float, float]]]
) -> list[str]:
    entries = ([("usage", "#222")] if points else []) + ([("limit", "#d62728")] if limit else [])
    entries += [
        (name, colour)
        for i, (name, colour) in enumerate(LAYERS)
        if any(p.layers[i] for p in points)
    ]
    entries += [(f"device {n}", c) for n, c in DEVICE_SERIES if device.get(n)]
    x = WIDTH - RIGHT + 12
    out = []
    for n, (name, colour) in enumerate(entries):
        y = TOP + 8 + n * 18
        out.append(
            f'<rect x="{x}" y="{y - 9}" width="12" height="12" fill="{colour}"/>'
            f'<text x="{x + 18}" y="{y + 1}" font-size="12">{name}</text>'
        )
    return out


def caption(incident: Incident) -> str:
    """The plot in words (peak and limit, and the device's peak and capacity when the probe
    sampled it), for readers of the page and of its DOM."""
    timeline = incident.timeline
    samples = timeline.samples if timeline else []
    device = device_series(incident, kill_wall_s(incident))
    on_device = ""
    if any(device.values()):
        peaks = {n: max(v for _, v in s) for n, s in device.items() if s}
        on_device = "; device " + ", ".join(f"{n} peak {fmt_bytes(v)}" for n, v in peaks.items())
        if (total := device_total(incident)) is not None:
            on_device += f" of {fmt_bytes(total)}"
        if not samples and usage_bytes(incident) is None:
            return on_device.removeprefix("; ")
    peak = (timeline.peak_bytes if timeline else None) or usage_bytes(incident)
    limits = [s.limit_bytes for s in samples if s.limit_bytes]
    limit = limits[-1] if limits else limit_bytes(incident)
    span = f"{samples[-1].t_seconds - samples[0].t_seconds:.0f} s sampled, " if samples else ""
    return f"{span}peak {fmt_bytes(peak)}, limit {fmt_bytes(limit)}{on_device}"
