"""`--json`: exactly `{"schema_version": 2, "incidents": [...], "warnings": [...]}`, the
contract that schemas/report.schema.json describes (and every test validates against).

Every Incident field is present (null when unknown), among them the diagnosis's `verdict`
and `verdict_code`; `unknown` is added so a machine reader gets the same list of gaps as a
person.  The document is written one incident at a time, so a
store or log of any size streams through.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

from oomwatch.diagnosis import unknowns
from oomwatch.incident import JSON_SCHEMA_VERSION, Incident


def incident_json(incident: Incident) -> dict[str, Any]:
    data = incident.to_dict()
    data["unknown"] = unknowns(incident)
    return data


def _dumps(value: Any, indent: int) -> str:
    # ensure_ascii: C1 controls and U+2028 in a hostile name reach the terminal escaped.
    text = json.dumps(value, indent=2, ensure_ascii=True)
    return text.replace("\n", "\n" + " " * indent)


def write(out: TextIO, incidents: Iterable[Incident], warnings: Callable[[], list[str]]) -> None:
    """Write the document as `render` would, incident by incident; `warnings()` is asked at
    the end (reading the input is what finds them)."""
    out.write(f'{{\n  "schema_version": {JSON_SCHEMA_VERSION},\n  "incidents": [')
    count = 0
    for incident in incidents:
        out.write(("\n" if count == 0 else ",\n") + "    " + _dumps(incident_json(incident), 4))
        count += 1
    out.write("\n  ]" if count else "]")
    out.write(',\n  "warnings": ' + _dumps(warnings(), 2) + "\n}\n")


def render(incidents: Sequence[Incident], warnings: Sequence[str]) -> str:
    out = io.StringIO()
    write(out, incidents, lambda: list(warnings))
    return out.getvalue()
