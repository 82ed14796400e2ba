"""Who can reach what: the thread seams' tests ask whether an object one thread holds leads,
through any attribute, to an object another thread owns.

`paths_to(root, kind)` follows what oomwatch's own objects hold: instance attributes (dict
and slots), containers, bound methods' owners, `functools.partial`s' arguments and closures'
cells; a `threading.Thread`'s too (its target and arguments, while it runs).  It does not
enter modules, classes, a function's globals or a running frame's locals: what only a
thread's own frame holds is that thread's alone.  Nor the HTTP client libraries' objects
(`LIBRARIES`: the Kubernetes client, urllib3): oomwatch hands them no object of its own, only
requests, and their pools refuse to be iterated."""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["paths_to"]

_ATOMS = (str, bytes, int, float, complex, bool, type(None), type, types.ModuleType)
LIBRARIES = frozenset({"kubernetes", "urllib3"})


def paths_to(root: object, kind: type, limit: int = 100_000) -> list[str]:
    """A path from `root` to each object of type `kind` it leads to (empty: none); past
    `limit` objects it raises rather than answer from part of the graph."""
    found: list[str] = []
    seen: set[int] = set()
    todo: list[tuple[str, object]] = [("root", root)]
    while todo:
        if len(seen) >= limit:
            raise AssertionError(f"more than {limit} objects reachable: the walk is not whole")
        path, obj = todo.pop()
        if id(obj) in seen or isinstance(obj, _ATOMS):
            continue
        seen.add(id(obj))
        if isinstance(obj, kind):
            found.append(path)
        if type(obj).__module__.partition(".")[0] not in LIBRARIES:
            todo.extend(_children(path, obj))
    return found


def _children(path: str, obj: object) -> Iterator[tuple[str, object]]:
    if isinstance(obj, types.FunctionType | types.BuiltinFunctionType):
        if isinstance(obj, types.FunctionType):
            for index, cell in enumerate(obj.__closure__ or ()):
                yield f"{path}.<cell {index}>", cell.cell_contents
        return
    if isinstance(obj, types.MethodType):
        yield f"{path}.__self__", obj.__self__
        return
    if isinstance(obj, functools.partial):
        yield f"{path}.func", obj.func
        yield from ((f"{path}.args[{i}]", a) for i, a in enumerate(obj.args))
        yield from ((f"{path}.{k}", v) for k, v in obj.keywords.items())
        return
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            yield f"{path}[{key!r}]", value
            yield f"{path}.<key {key!r}>", key
        return
    if isinstance(obj, list | tuple | set | frozenset):
        yield from ((f"{path}[{i}]", item) for i, item in enumerate(obj))
        return
    yield from _attributes(path, obj)


def _attributes(path: str, obj: object) -> Iterator[tuple[str, Any]]:
    for name, value in getattr(obj, "__dict__", {}).items():
        yield f"{path}.{name}", value
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                yield f"{path}.{name}", getattr(obj, name)
