"""A local stand-in for the Kubernetes API server, for the unmodified official client.

Serves what oomwatch uses, the way kube-apiserver answers it: pod list with a
resourceVersion, chunked watch streams (with bookmarks and `410 Gone` once the history is
compacted), events.k8s.io/v1 create and merge-patch with the API server's validation of
new-style Events, pod get and merge-patch.  For the `kubectl oomwatch` plugin (a user's
requests, outside the agent's RBAC guard: `guard_rbac=False`): core/v1 Event lists (the same
objects in the core view, field selectors, `limit`/`continue`), namespaced pod lists (label
and node selectors), and the `OOMIncident` CRD's discovery and objects (checked against its
schema, `managedFields` recorded, Tables of its printer columns for `kubectl get`; `users`
limits what a named user may do, as RBAC would); a `pods/exec` is recorded and refused.
Tests can fail requests (`fail_next`), answer
503 for a while (`unavailable`), or take the server off the network (`go_down`/`come_back`).
Every request is recorded as (verb, apiGroup, resource) for the RBAC test; `kubeconfig`
writes the file that points a client at it.
"""

from support.fakeapi.events import core_event
from support.fakeapi.kubeconfig import kubeconfig
from support.fakeapi.objects import (
    NODE,
    make_pod,
    merge_patch,
    oomincident_problem,
    running_status,
    validate_new_event,
)
from support.fakeapi.server import ALL_REQUESTS, FakeApiServer, Verb

__all__ = [
    "ALL_REQUESTS",
    "NODE",
    "FakeApiServer",
    "Verb",
    "core_event",
    "kubeconfig",
    "make_pod",
    "merge_patch",
    "oomincident_problem",
    "running_status",
    "validate_new_event",
]
