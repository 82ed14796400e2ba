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
from json.encoder import encode_basestring_ascii as _ascii_string  # the C function
from typing import Any, TextIO

from oomwatch.dataclass_dict import field_values, plain
from oomwatch.diagnosis import unknowns
from oomwatch.incident import JSON_SCHEMA_VERSION, Incident


def incident_json(incident: Incident) -> dict[str, Any]:
    data = incident.to_dict()
    data["unknown"] = unknowns(incident)
    return data


class _WithUnknown:
    """`incident_json(incident)` as `_encode` reads it: the incident's fields, then
    `unknown`, taken from the dataclass without building the dict first."""

    __slots__ = ("incident",)

    def __init__(self, incident: Incident) -> None:
        self.incident = incident


def _dumps(value: Any, indent: int) -> str:
    """`json.dumps(plain(value), indent=2, ensure_ascii=True)`, every line after the first
    indented `indent` more.  ensure_ascii: C1 controls and U+2028 in a hostile name reach
    the terminal escaped.  Written out here because the standard library encodes indented
    JSON in pure Python, generator by generator: a third of a dense report's time.
    Dataclasses are written as `plain` would convert them, without the converted copy."""
    parts: list[str] = []
    try:
        _encode(value, "\n" + " " * indent, parts)
    except _NotPlain:
        if isinstance(value, _WithUnknown):
            value = incident_json(value.incident)
        text = json.dumps(plain(value), indent=2, ensure_ascii=True)
        return text.replace("\n", "\n" + " " * indent)
    return "".join(parts)


class _NotPlain(Exception):
    """A value `_encode` does not write itself (left to `json.dumps`, errors included)."""


def _encode(value: Any, newline: str, out: list[str]) -> None:
    """Append the JSON of `value` as `json.dumps(indent=2)` writes it, lines joined by
    `newline` (a newline and the current indentation).  The commonest members (exact
    `str`, `None`, `int`) are written in the loops, without a call each."""
    if isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        _encode_members(value.items(), newline, out)
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        inner = newline + "  "
        separator = "[" + inner
        for item in value:
            kind = type(item)
            if kind is str:
                out.append(separator + _ascii_string(item))
            elif kind is int:
                out.append(separator + int.__repr__(item))
            else:
                out.append(separator)
                _encode(item, inner, out)
            separator = "," + inner
        out.append(newline + "]")
    elif isinstance(value, _WithUnknown):
        incident = value.incident
        names, values = field_values(incident)
        members = zip((*names, "unknown"), (*values, unknowns(incident)), strict=True)
        _encode_members(members, newline, out)
    elif not isinstance(value, type) and hasattr(type(value), "__dataclass_fields__"):
        names, values = field_values(value)
        if not names:
            out.append("{}")
            return
        _encode_members(zip(names, values, strict=True), newline, out)
    else:
        out.append(_scalar_text(value))


def _encode_members(members: Iterable[tuple[Any, Any]], newline: str, out: list[str]) -> None:
    """The members of a non-empty object (a dict's items, a dataclass's fields)."""
    inner = newline + "  "
    separator = "{" + inner
    for key, item in members:
        out.append(separator)
        out.append(_ascii_string(key if type(key) is str else _key_text(key)))
        kind = type(item)
        if kind is str:
            out.append(": " + _ascii_string(item))
        elif item is None:
            out.append(": null")
        elif kind is int:
            out.append(": " + int.__repr__(item))
        else:
            out.append(": ")
            _encode(item, inner, out)
        separator = "," + inner
    out.append(newline + "}")


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return _ascii_string(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float_text(value)
    raise _NotPlain


def _float_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _key_text(key: object) -> str:
    """A dict key as `json.dumps` converts it (bool and None before int: bool is an int)."""
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, float):
        return _float_text(key)
    if isinstance(key, int):
        return int.__repr__(key)
    raise _NotPlain


def write(out: TextIO, incidents: Iterable[Incident], warnings: Callable[[], list[str]]) -> None:
    """Write the document as `render` would, incident by incident; `warnings()` is asked at
    the end (reading the input is what finds them)."""
    out.write(f'{{\n  "schema_version": {JSON_SCHEMA_VERSION},\n  "incidents": [')
    count = 0
    for incident in incidents:
        out.write(("\n" if count == 0 else ",\n") + "    " + _dumps(_WithUnknown(incident), 4))
        count += 1
    out.write("\n  ]" if count else "]")
    out.write(',\n  "warnings": ' + _dumps(warnings(), 2) + "\n}\n")


def render(incidents: Sequence[Incident], warnings: Sequence[str]) -> str:
    out = io.StringIO()
    write(out, incidents, lambda: list(warnings))
    return out.getvalue()
