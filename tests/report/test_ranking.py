"""Summaries lead with the diagnosis: rows are one workload, container and verdict
code, ranked by what a reader can act on before their count, and a row's findings are its
most actionable incident's: six requests too large for the device and one fragmentation
OOM of one claimed pod (a real GPU run) are two rows, not one "×7" showing the former."""

from __future__ import annotations

from dataclasses import replace

from support.frameworks import FRAGMENTED, TOO_LARGE, framework

from oomwatch.incident import Incident
from oomwatch.report import page, summary, text


def _seven() -> list[Incident]:
    large = [
        replace(framework(TOO_LARGE), wall_time=f"2026-11-26T10:0{n}:00+00:00") for n in range(6)
    ]
    fragmented = replace(framework(FRAGMENTED), wall_time="2026-11-26T10:06:30+00:00")
    return [*large[:3], fragmented, *large[3:]]


def test_fragmentation_is_its_own_row_and_comes_first() -> None:
    incidents = _seven()
    table = summary.rows(incidents)
    assert [(r.cells[-1], len(r.numbers)) for r in table] == [
        ("device-fragmentation", 1),
        ("device-too-large", 6),
    ]
    assert table[0].numbers == (4,) and table[0].cells[3] == "claimed ml/trainer-0/trainer"


def test_text_and_html_show_the_fragmentation_finding_without_details() -> None:
    incidents = _seven()
    out = text.render(incidents, [], "node.log")
    top = out[out.index("Findings of the first 2 rows") :]
    first, second = top.index("#4 (1 kill)"), top.index("#1 (×6")
    assert first < second
    assert "expandable_segments:True" in top[first:second]
    assert "in claimed pod ml/trainer-0 (unverified)" in top
    assert "unknown cgroup" not in out
    html = page.render(incidents, [], "node.log")
    top_html = html[html.index('id="top"') :]
    assert top_html.index("#4 (1 kill)") < top_html.index("#1 (×6)")
    assert "claimed pod ml/trainer-0 (unverified)" in html


def test_a_group_shows_its_most_actionable_incident() -> None:
    """Within one row, the incident with advice and the most findings speaks for it."""
    bare = replace(framework(FRAGMENTED), recommendation=None)
    advised = framework(FRAGMENTED)
    [row] = summary.rows([bare, advised])
    assert row.numbers == (1, 2) and row.shown == 2


def test_every_verdict_code_has_a_rank() -> None:
    from oomwatch.diagnosis.device import CAUSE_CODES
    from oomwatch.diagnosis.ranking import ACTION_ORDER
    from oomwatch.diagnosis.verdict import _ELSEWHERE, _LIMIT_WORDS

    codes = {*CAUSE_CODES, *_ELSEWHERE, *_LIMIT_WORDS}
    assert codes | {"no-kill", "limit-unknown"} == set(ACTION_ORDER)


def test_the_html_draws_the_device_at_the_error() -> None:
    """allocated, reserved but unallocated, the rest of the process, the others, free."""
    from support.frameworks import SHARED

    html = page.render([framework(SHARED)], [], "node.log")
    assert 'id="device-1"' in html
    for words in (
        "allocated by tensors 20 GiB",
        "other processes 40.5 GiB",
        "free 18.2 GiB",
        "requested 30 GiB",
        "device capacity 79.2 GiB",
    ):
        assert words in html, words


def test_a_claim_is_shown_as_a_claim_and_claimed_containers_stay_apart() -> None:
    one = framework(FRAGMENTED)
    other = framework(
        FRAGMENTED, claimed={"namespace": "ml", "pod": "trainer-0", "container": "sidecar"}
    )
    table = summary.rows([one, other])
    assert [r.cells[3] for r in table] == [
        "claimed ml/trainer-0/trainer",
        "claimed ml/trainer-0/sidecar",
    ]
    out = text.render([one], [], "node.log")
    assert "  pod        claimed pod ml/trainer-0 container trainer (unverified)" in out
    assert "pod unverified: only the probe file claims it" in out


def test_the_sample_taken_while_handling_the_error_is_drawn() -> None:
    """The probe stamps the error, then samples the device (1.4 ms later on an H100): that
    one sample is the plot's point at the error, not an empty plot."""
    stamp = "2026-11-27T11:11:50.005207+00:00"
    one = {"wall_s": 1795777910.006592, "allocated_bytes": 58 * 2**30, "reserved_bytes": 78 * 2**30}
    late = {**one, "wall_s": one["wall_s"] + 5}  # not the error's: left out
    incident = replace(framework(FRAGMENTED, device_samples=[one, late]), wall_time=stamp)
    html = page.render([incident], [], "node.log")
    assert html.count('<circle class="allocator-allocated"') == 1
    assert html.count('<circle class="allocator-reserved"') == 1
