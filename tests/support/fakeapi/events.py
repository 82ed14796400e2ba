"""Events in the fake API server: events.k8s.io/v1 create and merge-patch (validated as the API
server validates new-style Events) and the core/v1 list of the same objects."""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

from support.fakeapi.objects import merge_patch, validate_new_event
from support.fakeapi.wire import ApiHandler, _field, _selector

_EVENTS = re.compile(
    r"^/apis/events\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/events(?:/(?P<name>[^/]+))?$"
)
_CORE_EVENTS = re.compile(r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/events$")


class EventRoutes(ApiHandler):
    def _list_events(self, path: str, query: dict[str, str], body: Any) -> None:
        m = _CORE_EVENTS.match(path)
        assert m is not None
        fields = _selector(query.get("fieldSelector", ""))
        with self.api.lock:
            items = [
                core_event(e)
                for (ns, _), e in sorted(self.api.events.items())
                if m["ns"] in (None, ns)
            ]
            rv = str(self.api._rv)
        items = [e for e in items if all(_field(e, k) == v for k, v in fields.items())]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items)
        page, rest = items[start : start + limit], start + limit < len(items)
        meta: dict[str, Any] = {"resourceVersion": rv}
        if rest:
            meta["continue"] = str(start + limit)
        self._list("EventList", "v1", page, meta)

    def _create_events(self, path: str, query: dict[str, str], body: Any) -> None:
        m = _EVENTS.match(path)
        assert m is not None
        problem = validate_new_event(body, m["ns"], creating=True)
        if problem:
            self._status(422, "Invalid", problem)
            return
        with self.api.lock:
            key = (m["ns"], body["metadata"]["name"])
            if key in self.api.events:
                self._status(409, "AlreadyExists", f'events "{key[1]}" already exists')
                return
            self.api._rv += 1
            stored = copy.deepcopy(body)
            stored["metadata"].update(
                namespace=m["ns"], uid=str(uuid.uuid4()), resourceVersion=str(self.api._rv)
            )
            self.api.events[key] = stored
            self.api.event_writes.append(("create", copy.deepcopy(body)))
            self.api.lock.notify_all()
        self._json(201, stored)

    def _patch_events(self, path: str, query: dict[str, str], body: Any) -> None:
        m = _EVENTS.match(path)
        assert m is not None
        if not self._merge_patch_only():
            return
        with self.api.lock:
            key = (m["ns"], m["name"])
            if key not in self.api.events:
                self._status(404, "NotFound", f'events "{m["name"]}" not found')
                return
            patched = merge_patch(self.api.events[key], body)
            problem = validate_new_event(patched, m["ns"], creating=False)
            if problem:
                self._status(422, "Invalid", problem)
                return
            self.api._rv += 1
            patched["metadata"]["resourceVersion"] = str(self.api._rv)
            self.api.events[key] = patched
            self.api.event_writes.append(("patch", copy.deepcopy(body)))
            self.api.lock.notify_all()
        self._json(200, patched)


def core_event(event: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event in the core/v1 view the API server serves of the same object."""
    core = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": copy.deepcopy(event["metadata"]),
        "involvedObject": copy.deepcopy(event.get("regarding") or {}),
        "reason": event.get("reason"),
        "message": event.get("note"),
        "type": event.get("type"),
        "action": event.get("action"),
        "eventTime": event.get("eventTime"),
        "reportingComponent": event.get("reportingController"),
        "reportingInstance": event.get("reportingInstance"),
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
    }
    if event.get("series"):
        core["series"] = copy.deepcopy(event["series"])
    return core
