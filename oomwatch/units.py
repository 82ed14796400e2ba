"""Sizes in words: the one place a byte count becomes text.

Two styles, never mixed: prose (report, advice, findings, Event notes, forecasts, decoder
notes) reads human sizes with binary units (`7.1 GiB`, `15 MiB/s`); a Kubernetes quantity
(`8411Mi`) appears only as a value to paste into a manifest or a Kubernetes object's field,
where it is the form the API itself writes.
"""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
BINARY_UNITS = (("B", 1), ("KiB", KIB), ("MiB", MIB), ("GiB", GIB), ("TiB", 1 << 40))
_QUANTITY_SUFFIXES = (("Ti", 1 << 40), ("Gi", GIB), ("Mi", MIB), ("Ki", KIB))


def fmt_bytes(value: float | None) -> str:
    """Human size with binary units (`256 MiB`, `7.1 GiB`, `512 KiB`); `?` when unknown."""
    if value is None:
        return "?"
    size = float(value)
    for unit, _ in BINARY_UNITS:
        if abs(size) < 1024 or unit == "TiB":
            text = f"{size:.0f}" if unit == "B" or abs(size) >= 100 else f"{size:.1f}"
            return f"{text.removesuffix('.0')} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover - loop always returns


def fmt_rate(bytes_per_second: float, *, signed: bool = False) -> str:
    """A growth rate in the same style (`15 MiB/s`; `+512 KiB/s` where the sign matters)."""
    text = fmt_bytes(abs(bytes_per_second)) + "/s"
    if not signed:
        return text if bytes_per_second >= 0 else "-" + text
    return ("-" if bytes_per_second < 0 else "+") + text


def quantity(value: int) -> str:
    """Bytes as the Kubernetes API writes a memory quantity: the largest binary suffix that
    states it exactly (`8Gi`, `8411Mi`, `1536Mi` for 1.5 GiB), plain bytes otherwise."""
    for suffix, size in _QUANTITY_SUFFIXES:
        if value >= size and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)
