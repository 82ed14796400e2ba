"""`Incident.to_dict` is `dataclasses.asdict` (the JSON contract), only cheaper."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from oomwatch.decode import decode_text
from oomwatch.incident import Attribution, AttributionCandidate, Finding, Incident

CORPUS = sorted((Path(__file__).resolve().parent / "data" / "corpus").glob("*.log"))


@pytest.mark.parametrize("path", CORPUS[::4], ids=[p.name.split("-", 1)[0] for p in CORPUS[::4]])
def test_every_decoded_incident_gives_what_asdict_gives(path: Path) -> None:
    for incident in decode_text(path.read_text(encoding="utf-8")).incidents:
        assert incident.to_dict() == dataclasses.asdict(incident)


def test_nested_and_copied_values_are_not_shared() -> None:
    incident = Incident(
        kind="memcg",
        findings=[Finding("kernel-memory", "info", "m", {"charged_bytes": 1, "rows": [1, 2]})],
        attribution=Attribution("counter", "ambiguous", [AttributionCandidate("/a")]),
    )
    data = incident.to_dict()
    assert data == dataclasses.asdict(incident)
    data["findings"][0]["evidence"]["rows"].append(3)
    assert incident.findings[0].evidence["rows"] == [1, 2]
