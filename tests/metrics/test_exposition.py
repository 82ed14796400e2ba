"""The agent's own text exposition, read back by two other implementations: the
`prometheus_client` parser (hostile label values round-trip, numbers as Go writes them) and
promtool's linter."""

from __future__ import annotations

import math
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.utils import floatToGoString
from support.prometheus import parsed_samples

from oomwatch.incident import Incident, PodContext, Victim
from oomwatch.sinks.exposition import Family, FamilySnapshot, go_float, render
from oomwatch.sinks.metrics import Metrics, SeriesLabels

LABEL_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_numbers_are_written_as_the_client_library_writes_them(value: float) -> None:
    expected: str = floatToGoString(value)  # type: ignore[no-untyped-call]  # untyped library
    assert go_float(value) == expected


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (1.0, "1.0"),
        (123.5, "123.5"),
        (1234567.0, "1.234567e+06"),
        (1e7, "1e+07"),
        (float(200 << 20), "2.097152e+08"),
        (1_795_334_400.0, "1.7953344e+09"),
        (-5.0, "-5.0"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_go_float_examples(value: float, text: str) -> None:
    assert go_float(value) == text


@given(st.lists(st.tuples(LABEL_TEXT, LABEL_TEXT), max_size=5, unique=True))
def test_any_label_value_reads_back_as_itself(rows: list[tuple[str, str]]) -> None:
    """Quotes, backslashes, newlines and `} 1` in a value end neither the value nor the line:
    the parser finds exactly the samples written, with their values."""
    family = Family("t_total", 'help with \\ and\n"quotes"', "counter", ("pod", "a_namespace"))
    for i, (pod, namespace) in enumerate(rows):
        family.inc((pod, namespace), i + 1)
    scraped = parsed_samples(render([family.snapshot()]))
    read = scraped.get("t_total", [])
    got = sorted((labels["pod"], labels["a_namespace"], value) for labels, value in read)
    assert got == sorted((pod, ns, float(i + 1)) for i, (pod, ns) in enumerate(rows))


def test_the_text_itself() -> None:
    counter = Family("c_total", "Help.", "counter", ("z", "a"))
    counter.inc(("1", 'x"y'), 2)
    gauge = Family("g_bytes", "Back\\slash\nnewline.", "gauge")
    gauge.set((), 1.5e9)
    empty = FamilySnapshot("e", "E.", "gauge", ("l",), [])
    assert render([counter.snapshot(), gauge.snapshot(), empty]) == (
        b"# HELP c_total Help.\n"
        b"# TYPE c_total counter\n"
        b'c_total{a="x\\"y",z="1"} 2.0\n'  # labels by name, as the client library sorts them
        b"# HELP g_bytes Back\\\\slash\\nnewline.\n"
        b"# TYPE g_bytes gauge\n"
        b"g_bytes 1.5e+09\n"
        b"# HELP e E.\n"
        b"# TYPE e gauge\n"
    )


def test_a_family_refuses_what_would_make_a_wrong_series() -> None:
    with pytest.raises(ValueError, match="`\\*_total`"):
        Family("kills", "Kills.", "counter")
    counter = Family("kills_total", "Kills.", "counter", ("pod",))
    with pytest.raises(ValueError, match="only goes up"):
        counter.inc(("p",), -1)
    with pytest.raises(ValueError, match="2 label values"):
        counter.inc(("p", "q"))
    counter.remove(("never-there",))  # nothing to drop: no error
    assert counter.snapshot().samples == []


def test_promtool_accepts_a_busy_agents_metrics(promtool: str) -> None:
    metrics = Metrics()
    for i in range(3):
        metrics.emit(
            Incident(
                kind="memcg",
                limit_scope="container",
                pod_uid=f"uid-{i}",
                k8s=PodContext(namespace="ml", pod=f"trainer-{i}", container="main"),
                wall_time="2026-11-22T08:00:00+00:00",
                victims=[Victim(pid=100 + i, comm="python3")],
            )
        )
        labels = SeriesLabels("ml", f"trainer-{i}", "main", f"uid-{i}")
        metrics.set_container_memory(labels, usage_bytes=(i + 1) << 20, limit_bytes=8 << 20)
        metrics.set_seconds_to_oom(labels, 60.0 * i)
    metrics.add_kmsg_lost(2)
    checked = subprocess.run(
        [promtool, "check", "metrics"],
        input=metrics.exposition(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
