"""Many incidents start with a summary table and leave each one in full to `--details`; the
verdict is one sentence of at most 200 characters; the JSON contract only grows."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.report_cli import corpus_file, corpus_files

from oomwatch.cgroup_identity import annotate
from oomwatch.decode import decode_text
from oomwatch.diagnosis import diagnose, verdict
from oomwatch.diagnosis.verdict import VERDICT_MAX_CHARS, verdict_code
from oomwatch.incident import Incident, MemcgUsage, PodContext, Victim
from oomwatch.report import jsonout, page, summary, text
from oomwatch.report.ticks import byte_ticks, nice_step, time_ticks

from .logs import three_hundred_kills

TERMINAL_COLUMNS = 120


@pytest.fixture(scope="module")
def log300(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("300") / "node.log"
    path.write_text(three_hundred_kills())
    return str(path)


def _table(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.split()[:2] == ["#", "time"])
    end = lines.index("", start)
    return lines[start:end]


def test_300_kills_read_in_one_screen(report, log300: str) -> None:  # type: ignore[no-untyped-def]
    run = report(log300)
    assert run.rc == 0
    lines = run.out.splitlines()
    assert lines[0] == (
        f"300 OOM incidents in {log300}, from 2026-11-20 09:00:00 to 2026-11-20 09:59:48:"
    )
    table = _table(run.out)
    assert lines.index(table[0]) == 2  # the table comes right after the headline
    assert table[0].split() == [
        "#",
        "time",
        "kills",
        "pod",
        "/",
        "cgroup",
        "victim",
        "kind",
        "limit",
        "dominant",
        "verdict",
    ]
    assert all(len(line) <= TERMINAL_COLUMNS for line in table)
    # the crash loop is one row; every other workload, container and verdict has its own,
    # the diagnosed and advised first: the rows with too little evidence to advise come last
    crash = table[1].split()
    assert crash[:3] == ["1", "09:00:00", "×250"] and crash[3:5] == ["pod", "5931aa75"]
    assert crash[5:] == ["stress-ng-vm", "memcg", "100", "MiB", "heap", "94", "%", "limit-pod"]
    numbers = [int(line.split()[0]) for line in table[1:]]
    assert len(numbers) == 17 and numbers[-3:] == [28, 58, 106]
    assert "limit-pod" in table[2] and "limit-node-allocatable" in table[4]
    group = next(line for line in table if "bash +4" in line)
    assert "pod a5d8fdd1" in group and "limit-node-allocatable" in group
    # then the largest rows' findings and advice, and how to see the rest: ~40 lines in all
    assert "Findings of the first 3 rows (of 17, the most actionable first):" in run.out
    assert "  #1 (×250, 09:00:00 to 09:59:48): stress-ng-vm (pid 183960) in pod 5931aa75" in run.out
    advice = "advice: Set the pod's containers' memory limits to at least a total of 120 MiB"
    assert advice in run.out
    assert "--details (300 blocks)" in run.out
    assert len(lines) <= 60 and run.out.count("== OOM") == 0


def test_details_prints_every_incident_after_the_table(report, log300: str) -> None:  # type: ignore[no-untyped-def]
    run = report(log300, "--details")
    assert run.out.count("\n== OOM ") == 300 and "== OOM 300 of 300" in run.out
    assert run.out.index("  #  time") < run.out.index("== OOM 1 of 300")


def test_the_page_ranks_its_rows_as_the_text_does(log300: str) -> None:
    """Severity and actionability, not the count, order the rows in text and HTML alike (the
    diagnosed pod-limit and node-allocatable rows before the too-little-evidence ones); the
    JSON keeps log order and gives each incident its `verdict_code` to rank by."""
    found = decode_text(Path(log300).read_bytes()).incidents
    incidents = [diagnose(annotate(i), found) for i in found]
    text_rows = [int(line.split()[0]) for line in _table(text.render(incidents, [], "log"))[1:]]
    html = page.render(incidents, [], "log")
    page_rows = [int(n) for n in re.findall(r'<details class="group"><summary>#(\d+) ', html)]
    assert page_rows == text_rows and text_rows[:2] == [1, 52]
    assert incidents[51].verdict_code == "limit-pod" and '"verdict_code": "limit-pod"' in (
        jsonout.render(incidents[51:52], [])
    )


def test_few_incidents_print_table_and_blocks(report, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    two = report(corpus_file(corpus, "02")).out
    assert two.splitlines()[2].split()[:2] == ["#", "time"]
    assert "== OOM 1 of 2" in two and "== OOM 2 of 2" in two and "Findings of" not in two
    one = report(corpus_file(corpus, "17")).out
    assert "  #  time" not in one and one.splitlines()[2].startswith("== OOM 1 of 1")


def test_summary_cells_of_a_group_kill(corpus: Path) -> None:
    from oomwatch.cgroup_identity import annotate
    from oomwatch.decode import decode_text

    [incident] = decode_text(Path(corpus_file(corpus, "01")).read_text()).incidents
    incident = diagnose(annotate(incident))
    [row] = summary.rows([incident])
    assert row.cells[3:] == (
        "pod a5d8fdd1",
        "bash (7788) +4",
        "memcg",
        "7.1 GiB",
        "heap 99 %",
        "limit-node-allocatable",
    )


def _corpus_incidents() -> list[Incident]:
    from oomwatch.cgroup_identity import annotate
    from oomwatch.decode import decode_text

    out: list[Incident] = []
    for path in corpus_files():
        found = decode_text(path.read_text()).incidents
        out.extend(diagnose(annotate(i), found) for i in found)
    return out


def test_every_corpus_verdict_is_one_sentence_to_read_aloud() -> None:
    incidents = _corpus_incidents()
    assert len(incidents) >= 40
    for incident in incidents:
        line = verdict(incident)
        assert len(line) <= VERDICT_MAX_CHARS, line
        # it starts with the victim's name, which may be `(resolved)` (corpus 74)
        assert line.endswith(".") and "\n" not in line and not line[0].isspace()
        assert verdict_code(incident) in {
            *(f.code for f in incident.findings),
            "no-kill",
            "node-panic",
            "limit-unknown",
        }
    # the reasoning and full advice are not lost: findings and the recommendation carry them
    assert any(len(i.recommendation["message"]) > 200 for i in incidents if i.recommendation)


HOSTILE = st.text(alphabet="\x1b[2J\u202e界 abc", min_size=15, max_size=15)


@settings(max_examples=60, deadline=None)
@given(HOSTILE, HOSTILE, st.integers(0, 8), st.booleans())
def test_verdict_fits_whatever_the_names(comm: str, pod: str, more: int, named: bool) -> None:
    victims = [
        Victim(pid=4_194_304 + n, comm=comm, anon_rss_bytes=1 << 40) for n in range(more + 1)
    ]
    incident = Incident(
        kind="memcg",
        limit_scope="container",
        task_memcg="/kubepods/burstable/pod" + "a" * 36 + "/" + "f" * 64 + "/" + pod * 4,
        oom_memcg="/kubepods/burstable/pod" + "a" * 36 + "/" + "f" * 64,
        pod_uid="a" * 36,
        container_id="f" * 64,
        memcg=MemcgUsage(usage_bytes=1 << 40, limit_bytes=1 << 40),
        victims=victims,
        k8s=PodContext(namespace=pod * 4, pod=pod * 8, container=pod) if named else None,
    )
    line = verdict(diagnose(incident))
    assert len(line) <= VERDICT_MAX_CHARS and "\x1b" not in line and "\u202e" not in line


def test_json_incidents_are_the_incident_fields(report, log300: str) -> None:  # type: ignore[no-untyped-def]
    doc = report(log300, "--json").json()
    assert set(doc) == {"schema_version", "incidents", "warnings"}
    assert len(doc["incidents"]) == 300
    fields = {f.name for f in dataclasses.fields(Incident)}
    for incident in doc["incidents"]:
        assert set(incident) == fields | {"unknown"}
    assert {i["verdict_code"] for i in doc["incidents"]} >= {"limit-pod", "limit-node"}


@pytest.mark.parametrize(
    ("span", "ticks", "step"),
    [(7.6, 4, 2), (108, 4, 50), (1, 5, 0.2), (179, 5, 50), (0.03, 4, 0.01)],
)
def test_nice_steps_are_1_2_5(span: float, ticks: int, step: float) -> None:
    assert nice_step(span, ticks) == pytest.approx(step)


def test_axis_ticks_are_round_in_human_units() -> None:
    top, marks = byte_ticks(7.6 * 2**30)
    assert top == 8 * 2**30 and [label for _, label in marks] == [
        "0",
        "2 GiB",
        "4 GiB",
        "6 GiB",
        "8 GiB",
    ]
    assert [label for _, label in byte_ticks(108 * 2**20)[1]] == [
        "0",
        "50 MiB",
        "100 MiB",
        "150 MiB",
    ]
    start, marks = time_ticks(600)
    assert start == -600 and [label for _, label in marks] == [
        "-10 min",
        "-8 min",
        "-6 min",
        "-4 min",
        "-2 min",
        "0",
    ]
    seconds = [label for _, label in time_ticks(179)[1]]
    assert seconds == ["-200 s", "-150 s", "-100 s", "-50 s", "0"]
    assert time_ticks(36 * 3600)[1][0][1] == "-40 h"
