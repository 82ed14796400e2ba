"""Counters and gauges, and their Prometheus text exposition (format 0.0.4).

The agent's few families need no client library: `prometheus_client`'s package imports
http.server, urllib.request, ssl, gzip and wsgiref for its own servers and push gateway,
some 7.8 MiB of an idle agent's 40 (bench/RESULTS.md, issue 26).  What a scrape reads is the
text format (https://prometheus.io/docs/instrumenting/exposition_formats/): `# HELP` and
`# TYPE` lines, then a sample per line, label values escaped (backslash, newline, double
quote), which `prometheus_client.parser` and promtool read back in the tests.

A family holds one float per tuple of label values; it has no lock of its own: its owner
(`sinks.metrics.Metrics`) changes and snapshots families under one lock, and the text is
written from the snapshot outside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

FamilyKind = Literal["counter", "gauge"]
Sample = tuple[tuple[str, ...], float]  # label values (in the family's label order), value


class Family:
    """A metric family: its samples' name (a counter's ends in `_total`), help text, kind and
    label names, and a value per label-value tuple.  An unlabelled family has its one sample
    from the start (0), as a scrape expects; a labelled one gains a sample on first use."""

    __slots__ = ("help_text", "kind", "label_names", "name", "values")

    def __init__(
        self, name: str, help_text: str, kind: FamilyKind, label_names: Sequence[str] = ()
    ) -> None:
        if kind == "counter" and not name.endswith("_total"):
            raise ValueError(f"counter {name!r}: a counter's samples are named `*_total`")
        self.name = name
        self.help_text = help_text
        self.kind: FamilyKind = kind
        self.label_names = tuple(label_names)
        self.values: dict[tuple[str, ...], float] = {} if label_names else {(): 0.0}

    def inc(self, label_values: tuple[str, ...] = (), amount: float = 1.0) -> None:
        self._check(label_values)
        if amount < 0 and self.kind == "counter":
            raise ValueError(f"{self.name}: a counter only goes up (asked {amount})")
        self.values[label_values] = self.values.get(label_values, 0.0) + amount

    def set(self, label_values: tuple[str, ...], value: float) -> None:
        self._check(label_values)
        self.values[label_values] = float(value)

    def remove(self, label_values: tuple[str, ...]) -> None:
        """Drop a labelled sample (none there: nothing happens)."""
        self.values.pop(label_values, None)

    def snapshot(self) -> FamilySnapshot:
        return FamilySnapshot(
            self.name, self.help_text, self.kind, self.label_names, list(self.values.items())
        )

    def _check(self, label_values: tuple[str, ...]) -> None:
        if len(label_values) != len(self.label_names):
            raise ValueError(
                f"{self.name}: {len(label_values)} label values for {self.label_names}"
            )


@dataclass(frozen=True, slots=True)
class FamilySnapshot:
    """A family's samples at one moment (what a scrape writes)."""

    name: str
    help_text: str
    kind: FamilyKind
    label_names: tuple[str, ...]
    samples: list[Sample]


def render(families: Iterable[FamilySnapshot]) -> bytes:
    """The text exposition of `families`, in their order, samples in theirs; labels sorted by
    name, as `prometheus_client` writes them (dashboards and diffs see no change)."""
    out: list[str] = []
    for family in families:
        help_text = family.help_text.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {family.name} {help_text}\n# TYPE {family.name} {family.kind}\n")
        names = family.label_names
        order = sorted(range(len(names)), key=names.__getitem__)
        for values, value in family.samples:
            if names:
                labels = ",".join(f'{names[i]}="{escape_label_value(values[i])}"' for i in order)
                out.append(f"{family.name}{{{labels}}} {go_float(value)}\n")
            else:
                out.append(f"{family.name} {go_float(value)}\n")
    return "".join(out).encode()


def escape_label_value(value: str) -> str:
    """Backslash, newline and double quote escaped: a value can end neither its quotes nor
    its line (a pod name is the cluster's, but it is still text from outside)."""
    if "\\" not in value and "\n" not in value and '"' not in value:
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def go_float(value: float) -> str:
    """A float as Go's strconv writes it, which Prometheus and `prometheus_client` use: an
    exponent from 1e+06 on (Python's repr switches only at 1e16), `+Inf`, `NaN`."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:  # 1234567.0 -> 1.234567e+06
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text
