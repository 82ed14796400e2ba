"""The JSON contract (schemas/report.schema.json): every `--json` document and every stored
incident the tests see is validated against it."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "report.schema.json"


@cache
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    Draft202012Validator.check_schema(data)
    return data


@cache
def _validator(ref: str | None) -> Draft202012Validator:
    root = schema()
    if ref is None:
        return Draft202012Validator(root)
    # The same definitions, the root pointed at one of them.
    return Draft202012Validator(
        {"$schema": root["$schema"], "$defs": root["$defs"], "$ref": f"#/$defs/{ref}"}
    )


def _check(validator: Draft202012Validator, data: Any, what: str) -> None:
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        shown = "\n".join(
            f"  {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:10]
        )
        raise AssertionError(f"{what} does not follow schemas/report.schema.json:\n{shown}")


def validate_report(doc: Any) -> None:
    """A whole `oomwatch report --json` document."""
    _check(_validator(None), doc, "report --json")


def validate_stored(incident: Any) -> None:
    """One incident as the store keeps it (`Incident.to_dict()`)."""
    _check(_validator("StoredIncident"), incident, "stored incident")
