"""`--json`: exactly `{"incidents": [...], "warnings": [...]}` with the contract keys.

Every Incident field is present (null when unknown); `verdict`, `verdict_code` and `unknown`
are added so a machine reader gets the same one-line answer, the code the text summary shows,
and the same list of gaps as a person.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from oomwatch.diagnosis import unknowns, verdict
from oomwatch.diagnosis.verdict import verdict_code
from oomwatch.incident import Incident


def incident_json(incident: Incident) -> dict[str, Any]:
    data = incident.to_dict()
    data["verdict"] = verdict(incident)
    data["verdict_code"] = verdict_code(incident)
    data["unknown"] = unknowns(incident)
    return data


def render(incidents: Sequence[Incident], warnings: Sequence[str]) -> str:
    # ensure_ascii: C1 controls and U+2028 in a hostile name reach the terminal escaped.
    doc = {"incidents": [incident_json(i) for i in incidents], "warnings": list(warnings)}
    return json.dumps(doc, indent=2, ensure_ascii=True) + "\n"
