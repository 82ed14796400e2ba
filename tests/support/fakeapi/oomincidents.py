"""OOMIncident objects in the fake API server: the CRD's objects checked against its schema,
`managedFields` recorded, and Tables of its printer columns for `kubectl get`."""

from __future__ import annotations

import copy
import re
import time
import uuid
from typing import Any

from oomwatch.kube.crd import PRINTER_COLUMNS
from support.fakeapi.objects import merge_patch, oomincident_problem
from support.fakeapi.wire import ApiHandler, _field, _now, _selector

_OOMI = re.compile(
    r"^/apis/oomwatch\.io/v1alpha1(?:/namespaces/(?P<ns>[^/]+))?/oomincidents(?:/(?P<name>[^/]+))?$"
)


class OomIncidentRoutes(ApiHandler):
    def _oomi_key(self, path: str) -> tuple[str | None, str | None]:
        m = _OOMI.match(path)
        assert m is not None
        return m["ns"], m["name"]

    def _list_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
        ns, _ = self._oomi_key(path)
        labels = _selector(query.get("labelSelector", ""))
        with self.api.lock:
            items = [
                copy.deepcopy(o)
                for (n, _), o in sorted(self.api.oomincidents.items())
                if ns in (None, n)
                and all(o["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
            ]
            rv = str(self.api._rv)
        if self._wants_table():
            self._json(200, _table(items, rv))
            return
        self._list("OOMIncidentList", "oomwatch.io/v1alpha1", items, {"resourceVersion": rv})

    def _get_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
        ns, name = self._oomi_key(path)
        with self.api.lock:
            obj = copy.deepcopy(self.api.oomincidents.get((ns or "", name or "")))
        if obj is None:
            self._status(404, "NotFound", f'oomincidents.oomwatch.io "{name}" not found')
        elif self._wants_table():
            self._json(200, _table([obj], obj["metadata"]["resourceVersion"]))
        else:
            self._json(200, obj)

    def _create_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
        ns, _ = self._oomi_key(path)
        problem = oomincident_problem(body)
        if problem:
            self._status(422, "Invalid", problem)
            return
        with self.api.lock:
            key = (ns or "", body["metadata"]["name"])
            if key in self.api.oomincidents:
                self._status(409, "AlreadyExists", f'oomincidents "{key[1]}" already exists')
                return
            self.api._rv += 1
            stored = copy.deepcopy(body)
            stored["metadata"].update(
                namespace=key[0],
                uid=str(uuid.uuid4()),
                resourceVersion=str(self.api._rv),
                creationTimestamp=_now(),
                managedFields=_managed([], query.get("fieldManager"), "Update"),
            )
            self.api.oomincidents[key] = stored
            self.api.oomincident_writes.append(("create", key[1]))
            self.api.lock.notify_all()
        self._json(201, stored)

    def _patch_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
        ns, name = self._oomi_key(path)
        if not self._merge_patch_only():
            return
        with self.api.lock:
            key = (ns or "", name or "")
            if key not in self.api.oomincidents:
                self._status(404, "NotFound", f'oomincidents "{name}" not found')
                return
            patched = merge_patch(self.api.oomincidents[key], body)
            problem = oomincident_problem(patched)
            if problem:
                self._status(422, "Invalid", problem)
                return
            self.api._rv += 1
            meta = patched["metadata"]
            meta["resourceVersion"] = str(self.api._rv)
            meta["managedFields"] = _managed(
                meta.get("managedFields") or [], query.get("fieldManager"), "Update"
            )
            self.api.oomincidents[key] = patched
            self.api.oomincident_writes.append(("patch", key[1]))
            self.api.lock.notify_all()
        self._json(200, patched)

    def _delete_oomincidents(self, path: str, query: dict[str, str], body: Any) -> None:
        ns, name = self._oomi_key(path)
        with self.api.lock:
            gone = self.api.oomincidents.pop((ns or "", name or ""), None)
            if gone is not None:
                self.api.oomincident_writes.append(("delete", name or ""))
            self.api.lock.notify_all()
        if gone is None:
            self._status(404, "NotFound", f'oomincidents "{name}" not found')
        else:
            self._json(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})


def _managed(entries: list[dict[str, Any]], manager: str | None, operation: str) -> list[Any]:
    """managedFields after a write by `manager` (the API server records who wrote)."""
    name = manager or "unknown"
    kept = [e for e in entries if e.get("manager") != name]
    return [
        *kept,
        {
            "manager": name,
            "operation": operation,
            "apiVersion": "oomwatch.io/v1alpha1",
            "time": _now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": {},
        },
    ]


def _cell(obj: dict[str, Any], column: dict[str, Any]) -> Any:
    """A cell as the API server's CRD table convertor gives it: dates as an age (`5m`)."""
    value = _field(obj, column["jsonPath"].lstrip("."))
    if column["type"] != "date" or not isinstance(value, str):
        return value
    then = time.mktime(time.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    age_s = max(0, int(time.time() - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if age_s >= size:
            return f"{age_s // size}{unit}"
    return f"{age_s}s"


def _table(items: list[dict[str, Any]], rv: str) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table of the CRD's printer columns (what kubectl get shows)."""
    columns = [{"name": "Name", "type": "string", "format": "name", "priority": 0}]
    columns += [
        {"name": c["name"], "type": c["type"], "priority": c.get("priority", 0)}
        for c in PRINTER_COLUMNS
    ]
    rows = [
        {
            "cells": [o["metadata"]["name"], *(_cell(o, c) for c in PRINTER_COLUMNS)],
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o["metadata"],
            },
        }
        for o in items
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": columns,
        "rows": rows,
    }
