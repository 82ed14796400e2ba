"""Dataclasses to JSON-ready dicts and back, for the incident and its parts.

`plain_dataclass` is what `dataclasses.asdict` gives, at a third of its cost (asdict deep-copies
every leaf; a report writes thousands of rows).  `known_fields` keeps the keys a dataclass has,
so a record written by a newer agent, with fields this one does not know, still reads.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "field_values",
    "known_fields",
    "optional_from_dict",
    "plain",
    "plain_dataclass",
    "replaced",
]

_T = TypeVar("_T")
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_FIELD_GETTERS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}
_LEAVES = (str, int, float, bool, type(None))
# Per class: each field's position in `__init__` and a getter of all field values, or None
# where `replaced` must leave the work to `dataclasses.replace` (init=False, InitVar, kw_only).
_POSITIONAL: dict[type, tuple[dict[str, int], Callable[[Any], tuple[Any, ...]]] | None] = {}


def plain_dataclass(value: Any) -> dict[str, Any]:
    names = _FIELD_NAMES.get(type(value))
    if names is None:
        names = _FIELD_NAMES[type(value)] = tuple(f.name for f in dataclasses.fields(value))
    return {name: plain(getattr(value, name)) for name in names}


def field_values(value: Any) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """A dataclass's field names and values (as they are, not converted), in field order:
    what `plain_dataclass` reads, for a caller that writes them out itself (`--json`)."""
    known = _FIELD_GETTERS.get(type(value))
    if known is None:
        names = tuple(f.name for f in dataclasses.fields(value))
        getter = operator.attrgetter(*names) if len(names) > 1 else _one_or_none(names)
        known = _FIELD_GETTERS[type(value)] = (names, getter)
    names, getter = known
    return names, getter(value)


def replaced(value: _T, **changes: Any) -> _T:
    """`dataclasses.replace(value, **changes)`, the unchanged fields read by one getter and
    passed by position: `replace` walks every field in Python, and an incident has ~70 (it
    is copied twice per incident on the report path)."""
    cls = type(value)
    known = _POSITIONAL.get(cls, ...)
    if known is ...:
        known = _POSITIONAL[cls] = _positional(cls)
    if known is None or not changes.keys() <= known[0].keys():
        return dataclasses.replace(value, **changes)  # type: ignore[type-var]
    index, getter = known
    args = list(getter(value))
    for name, item in changes.items():
        args[index[name]] = item
    return cls(*args)


def _positional(cls: type) -> tuple[dict[str, int], Callable[[Any], tuple[Any, ...]]] | None:
    fields = dataclasses.fields(cls)
    if len(fields) < 2 or len(fields) != len(cls.__dataclass_fields__):  # type: ignore[attr-defined]
        return None  # a ClassVar or InitVar pseudo-field, or too few for `attrgetter`'s tuple
    if any(not f.init or f.kw_only for f in fields):
        return None
    names = tuple(f.name for f in fields)
    return {name: i for i, name in enumerate(names)}, operator.attrgetter(*names)


def _one_or_none(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """`attrgetter` for one field or none, as a tuple (attrgetter gives a lone value)."""
    return lambda value: tuple(getattr(value, name) for name in names)


def plain(value: Any) -> Any:
    """`dataclasses.asdict`'s recursion for what incidents hold: dataclasses, lists, tuples,
    dicts and JSON leaves (anything else is copied as asdict would)."""
    if isinstance(value, _LEAVES):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain_dataclass(value)
    if type(value) is list:
        return [plain(v) for v in value]
    if type(value) is tuple:
        return tuple(plain(v) for v in value)
    if type(value) is dict:
        return {plain(k): plain(v) for k, v in value.items()}
    return copy.deepcopy(value)


def known_fields(cls: type[Any], data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def optional_from_dict(cls: type[_T], value: dict[str, Any] | None) -> _T | None:
    return None if value is None else cls(**known_fields(cls, value))
