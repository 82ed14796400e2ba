"""`Incident.to_dict` is `dataclasses.asdict` (the JSON contract), only cheaper."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from oomwatch.dataclass_dict import replaced
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


def test_replaced_is_dataclasses_replace() -> None:
    """`replaced` (the report path's copy of an incident) gives what `dataclasses.replace`
    gives, and leaves what it cannot do by position to it, errors included."""
    incident = decode_text(CORPUS[0].read_text(encoding="utf-8")).incidents[0]
    found = [Finding("page-cache", "info", "m", {})]
    copied = replaced(incident, pod_uid="uid-1", findings=found, kind="global")
    assert copied == dataclasses.replace(incident, pod_uid="uid-1", findings=found, kind="global")
    assert copied is not incident and incident.pod_uid != "uid-1"
    assert replaced(found[0], severity="warning") == dataclasses.replace(
        found[0], severity="warning"
    )
    with pytest.raises(TypeError):
        replaced(incident, no_such_field=1)

    @dataclasses.dataclass
    class Derived:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    assert replaced(Derived(1), a=2) == Derived(2)
    with pytest.raises(ValueError):
        replaced(Derived(1), b=2)
