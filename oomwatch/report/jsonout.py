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
from operator import itemgetter
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
        elif _STR.issuperset(map(type, value)):
            out.append(_object_text(tuple(value), tuple(value.values()), newline))
        else:
            _encode_members(value.items(), newline, out)
    elif isinstance(value, (list, tuple)):  # a tuple of types: faster than `list | tuple`
        if not value:
            out.append("[]")
            return
        inner = newline + "  "
        if _STR.issuperset(map(type, value)):  # `unknown`, the advice's lines
            out.append("[" + inner + ("," + inner).join(map(_ascii_string, value)))
            out.append(newline + "]")
            return
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
        out.append(_object_text((*names, "unknown"), (*values, unknowns(incident)), newline))
    elif not isinstance(value, type) and hasattr(type(value), "__dataclass_fields__"):
        names, values = field_values(value)
        out.append(_object_text(names, values, newline) if names else "{}")
    else:
        out.append(_scalar_text(value))


_STR = frozenset((str,))
# An object's text with its keys, its nulls and the places of its other values written
# once per (keys, indentation, exact types of the values): a report writes thousands of
# objects of a few shapes.  Bounded, as dict keys come from the log.
# A value's conversion: a function of it, or None for a nested value (`_encode`).
_Plan = tuple[
    str,
    Callable[[Sequence[Any]], Any] | None,
    tuple[tuple[int, Callable[[Any], str] | None], ...],
]
_SCALARS = frozenset((bool, float))
_PLANS: dict[tuple[tuple[str, ...], str, tuple[type, ...]], _Plan] = {}
MAX_PLANS = 512


def _object_text(names: tuple[str, ...], values: Sequence[Any], newline: str) -> str:
    """A non-empty object (str keys) as `_encode_members` writes it: its plan's template
    `%`-formatted with the values that are not null (ints by `%d`, which is `int.__repr__`
    for an exact int; strings escaped; anything else by `_encode`)."""
    types = tuple(map(type, values))
    key = (names, newline, types)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(names, types, newline)
        if len(_PLANS) < MAX_PLANS:
            _PLANS[key] = plan
    template, select, converts = plan
    if select is None:
        return template  # nothing but nulls
    if not converts:  # ints only
        text: str = template % select(values)
        return text
    args = list(select(values))
    for index, convert in converts:
        if convert is not None:
            args[index] = convert(args[index])
        else:
            parts: list[str] = []
            _encode(args[index], newline + "  ", parts)
            args[index] = "".join(parts)
    return template % tuple(args)


def _plan(names: tuple[str, ...], types: tuple[type, ...], newline: str) -> _Plan:
    inner = newline + "  "
    pieces: list[str] = []
    kept: list[int] = []  # positions of the values formatted in
    converts: list[tuple[int, Callable[[Any], str] | None]] = []  # (index among `kept`, how)
    for position, (name, kind) in enumerate(zip(names, types, strict=True)):
        head = ("{" if position == 0 else ",") + inner + _ascii_string(name).replace("%", "%%")
        if kind is type(None):
            pieces.append(head + ": null")
            continue
        if kind is not int:  # strings escaped, bools and floats as JSON writes them
            how = _ascii_string if kind is str else _scalar_text if kind in _SCALARS else None
            converts.append((len(kept), how))
        kept.append(position)
        pieces.append(head + (": %d" if kind is int else ": %s"))
    template = "".join(pieces) + newline + "}"
    if not kept:
        return template.replace("%%", "%"), None, ()
    select = itemgetter(*kept) if len(kept) > 1 else (lambda v, at=kept[0]: (v[at],))
    return template, select, tuple(converts)


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


_INFINITIES = (float("inf"), float("-inf"))


def _float_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value in _INFINITIES:
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
