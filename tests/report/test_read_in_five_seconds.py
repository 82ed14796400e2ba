"""The report as a person reads it: a panicked node says so and why, an inferred
year is marked, sizing advice stays within its window, the advice fits the terminal, and
`--help` shows defaults and exit statuses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from oomwatch.cgroup_identity import annotate
from oomwatch.cli import main
from oomwatch.decode import Reference, decode_text
from oomwatch.diagnosis import diagnose, unknowns
from oomwatch.incident import Incident, MemcgUsage, Timeline, TimelineSample, Victim
from oomwatch.kube.quantity import parse_quantity_bytes
from oomwatch.report import jsonout, page, text
from oomwatch.units import fmt_bytes, fmt_rate, quantity

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
MIB = 1 << 20
POD = "/kubepods/burstable/pod1d2c/" + "ab" * 32


def _corpus(prefix: str) -> list[Incident]:
    [path] = CORPUS.glob(f"{prefix}-*.log")
    found = decode_text(path.read_bytes()).incidents
    return [diagnose(annotate(i), found) for i in found]


def _outputs(incident: Incident) -> tuple[str, str, str]:
    """Text, HTML and JSON of one incident."""
    return (
        text.render([incident], [], "log"),
        page.render([incident], [], "log"),
        jsonout.render([incident], []),
    )


def test_an_oom_ending_in_a_panic_says_the_node_went_down_and_why() -> None:
    """Corpus 10 (lkml, 6.8 arm): `Out of memory and no killable processes...`, then
    `Kernel panic - not syncing: System is deadlocked on memory`."""
    panicked = _corpus("10")[1]
    assert panicked.verdict_code == "node-panic"
    assert "found nothing it could kill, so the node panicked" in (panicked.verdict or "")
    assert "log is cut" not in (panicked.verdict or "")
    for out in _outputs(panicked):
        assert "node-panic" in out and "no limit on a killable pod would have helped" in out
    text_out, html_out, _ = _outputs(panicked)
    assert "OOM ending in a kernel panic (the node went down)" in text_out  # not "a kill"
    assert "OOM ending in a kernel panic (the node went down)" in html_out


def test_panic_on_oom_is_named_as_the_cause() -> None:
    lines = [
        "[  910.064760] kworker/1:2 invoked oom-killer: gfp_mask=0xd0, order=0, oom_score_adj=0",
        "[  910.113950] Kernel panic - not syncing: Out of memory: compulsory panic_on_oom is"
        " enabled",
    ]
    [incident] = decode_text("\n".join(lines) + "\n").incidents
    out = diagnose(annotate(incident))
    assert out.verdict_code == "node-panic" and "vm.panic_on_oom" in (out.verdict or "")
    panic = next(f for f in out.findings if f.code == "node-panic")
    assert panic.evidence["panic_on_oom"] is True and "unset it" in panic.message
    # nothing says a kill was missed: the panic proves there was none
    assert "no kill line: the report ends in a kernel panic" in out.notes
    assert not [n for n in out.notes if "log is cut" in n]
    assert not [u for u in unknowns(out) if "victim" in u or "survived" in u]


def test_an_oom_without_a_kill_or_a_panic_keeps_its_words() -> None:
    out = _corpus("56")[0]
    assert out.verdict_code == "no-kill" and "or the log is cut" in (out.verdict or "")
    assert ", no kill in this log, " in _outputs(out)[0].splitlines()[2]  # the heading


def test_an_inferred_year_is_marked_in_every_output() -> None:
    log = "-- Logs begin at Tue 2023-03-14 10:00:00 UTC. --\n"
    log += (
        "Mar 15 10:00:01 node-1 kernel: Out of memory: Killed process 42 (java) "
        "total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB "
        "oom_score_adj:0\n"
    )
    [incident] = decode_text(log, Reference(1700000000.0)).incidents
    out = diagnose(annotate(incident))
    assert out.year_inferred_from == "journal banner"
    rendered = _outputs(out)
    assert "2023-03-15T10:00:01 (year inferred: journal banner)" in rendered[0]
    assert "year inferred: journal banner" in rendered[1]
    assert '"year_inferred_from": "journal banner"' in rendered[2]


def _watched(usages_mib: list[float], step_s: float = 0.5) -> Incident:
    samples = [
        TimelineSample(
            t_seconds=1000.0 + i * step_s, usage_bytes=int(u * MIB), limit_bytes=64 * MIB
        )
        for i, u in enumerate(usages_mib)
    ]
    timeline = Timeline(
        samples=samples,
        interval_seconds=step_s,
        peak_bytes=max(s.usage_bytes for s in samples),
        usage_at_kill_bytes=samples[-1].usage_bytes,
    )
    return Incident(
        kind="memcg",
        oom_memcg=POD,
        task_memcg=POD,
        memcg=MemcgUsage(64 * MIB, 64 * MIB, 1),
        victims=[Victim(pid=7, comm="hog", anon_rss_bytes=63 * MIB)],
        timeline=timeline,
    )


def test_growth_to_the_end_of_a_short_window_sizes_no_limit() -> None:
    """`oomwatch demo`'s shape: 15 MiB/s from the start to the kill, 8 samples over ~4 s."""
    out = diagnose(annotate(_watched([4 + 7.5 * i for i in range(9)])))
    rec = out.recommendation
    assert rec is not None and rec["action"] == "watch-longer"
    assert rec["memory_limit_bytes"] is None and rec["memory_limit"] is None
    assert "grew without levelling off for the 4 s it was watched" in rec["message"]
    assert "a larger limit may only delay the kill" in rec["message"]
    assert "levelling off" in (out.verdict or "")
    for rendered in _outputs(out):  # the advice in words, no size to paste, in every output
        assert "grew without levelling off for the 4 s it was watched" in rendered
        assert "resources.limits.memory" not in rendered and "4 MiB to 64 MiB" in rendered
    assert '"action": "watch-longer"' in jsonout.render([out], [])


def test_a_window_that_levelled_off_still_sizes_the_limit() -> None:
    out = diagnose(annotate(_watched([10, 30, 50, 60, 62, 63, 63, 63.5, 64])))
    rec = out.recommendation
    assert rec is not None and rec["action"] == "resize" and rec["memory_limit_bytes"]


def test_the_advice_is_wrapped_to_the_terminal_and_kept_whole_for_a_pipe() -> None:
    incident = _corpus("01")[0]
    advice = (incident.recommendation or {})["message"]
    assert len(advice) > 100
    piped = text.render([incident], [], "log")
    assert any(advice in line for line in piped.splitlines())
    wrapped = text.render([incident], [], "log", width=72)
    block = [line for line in wrapped.splitlines() if line.startswith("  advice")]
    assert block and all(len(line) <= 72 for line in block)
    lines = wrapped.splitlines()
    start = lines.index(block[0])
    joined = " ".join(line.strip() for line in lines[start : start + 12])
    assert " ".join(advice.split()) in " ".join(joined.split())


def test_run_help_shows_defaults_and_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: /var/lib/oomwatch)" in out and "(default: 1.0)" in out
    assert "Exit status: 0 after a clean stop" in out and "2 for a bad setting" in out


def test_report_help_documents_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 whether or not kills were found; 1 when" in out
    assert "2 when the input cannot be read" in out


# A Kubernetes quantity (`308Mi`) outside a backquoted manifest value.
_BARE_QUANTITY = re.compile(r"\b\d+(?:\.\d+)?[KMGTPE]i\b")


def _prose_of(doc: dict[str, Any]) -> list[str]:
    """The human strings of a JSON incident: verdict, findings, advice, notes, unknowns."""
    rec = doc.get("recommendation") or {}
    return [
        doc.get("verdict") or "",
        rec.get("message") or "",
        *(f["message"] for f in doc["findings"]),
        *doc["notes"],
        *doc["unknown"],
    ]


def test_one_unit_style_in_every_output_of_every_corpus_paste() -> None:
    """Prose reads human sizes (`308 MiB`); a quantity is only a backquoted manifest value
    (`resources.limits.memory: 308Mi`), never a figure in a sentence."""
    advised = 0
    for path in sorted(CORPUS.glob("*.log")):
        found = decode_text(path.read_bytes()).incidents
        incidents = [diagnose(annotate(i), found) for i in found]
        if not incidents:
            continue
        rendered = [text.render(incidents, [], "log"), page.render(incidents, [], "log")]
        docs = json.loads(jsonout.render(incidents, []))["incidents"]
        rendered += [" ".join(_prose_of(doc)) for doc in docs]
        for out in rendered:
            prose = re.sub(r"`[^`\n]*`|<code>[^<]*</code>", "", out)
            assert not _BARE_QUANTITY.search(prose), (path.name, _BARE_QUANTITY.findall(prose))
            assert not re.search(r"\d(?:MiB|GiB|KiB|kB)\b", prose), path.name  # `256.0MiB`
        for doc in docs:
            rec = doc.get("recommendation") or {}
            for field, key in (("limits", "memory_limit"), ("requests", "memory_request")):
                if f"`resources.{field}.memory: " not in (rec.get("message") or ""):
                    continue
                advised += 1  # the value to paste is the JSON's, and the prose says it too
                assert f"`resources.{field}.memory: {rec[key]}`" in rec["message"]
                assert rec[f"{key}_bytes"] == parse_quantity_bytes(rec[key])
                assert fmt_bytes(rec[f"{key}_bytes"]) in rec["message"]
    assert advised >= 2  # corpus 23 and 97: pods whose node ran out get a request to paste


def test_sizes_have_one_formatting_home() -> None:
    assert [fmt_bytes(v) for v in (None, 0, 1023, 1536, 300 * MIB, 8411 * MIB)] == [
        "?",
        "0 B",
        "1023 B",
        "1.5 KiB",
        "300 MiB",
        "8.2 GiB",
    ]
    assert fmt_rate(15 * MIB) == "15 MiB/s" and fmt_rate(MIB / 2, signed=True) == "+512 KiB/s"
    assert fmt_rate(-2 * MIB, signed=True) == "-2 MiB/s" and fmt_rate(0, signed=True) == "+0 B/s"
    # as the API writes a quantity: exact, the largest suffix that states it
    assert [quantity(v) for v in (8411 * MIB, 8 << 30, 1536 * MIB, 1000, 3 << 10)] == [
        "8411Mi",
        "8Gi",
        "1536Mi",
        "1000",
        "3Ki",
    ]
    assert all(parse_quantity_bytes(quantity(v)) == v for v in (1, 8411 * MIB, 5 << 40))


def test_the_value_to_paste_is_set_apart_in_text_html_and_json() -> None:
    """Corpus 97 (k3d, global OOM of a BestEffort pod's `tail`): the request is advised in
    words and as the manifest value, which the page shows as code."""
    [incident] = _corpus("97")
    rec = incident.recommendation or {}
    assert rec["memory_request"] == "779Mi" and rec["memory_request_bytes"] == 779 * MIB
    rendered = _outputs(incident)
    assert "set its memory request to about 779 MiB" in incident.verdict  # type: ignore[operator]
    assert "In the container's spec: `resources.requests.memory: 779Mi`." in rendered[0]
    assert "<code>resources.requests.memory: 779Mi</code>" in rendered[1]
    assert '"memory_request": "779Mi"' in rendered[2]


def test_a_summary_marks_an_inferred_year_and_where_the_chain_began() -> None:
    """Corpus 100 (linux-mm 2001, syslog stamps without a year, four kills): every kill's
    year rests on the reference time, the later ones through the first; the summary's span
    shows the year, so it says it was inferred, in text and HTML."""
    path = next(CORPUS.glob("100-*.log"))
    found = decode_text(path.read_bytes(), Reference(1700000000.0)).incidents
    incidents = [diagnose(annotate(i), found) for i in found]
    assert len(incidents) == 4
    assert {i.year_inferred_from for i in incidents} == {"reference time"}
    span = "from 2023-03-23 11:48:49 to 2023-03-23 11:48:50 (year inferred: reference time)"
    assert span in text.render(incidents, [], "log").splitlines()[0]
    assert span in page.render(incidents, [], "log")
