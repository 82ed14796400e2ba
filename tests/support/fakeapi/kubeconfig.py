"""A kubeconfig file that points a client (the official Python one, kubectl) at a fake server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def kubeconfig(
    path: Path,
    server: str,
    *,
    user: str = "agent",
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    """Write one context, `fake`, for `user` (a bearer `token` if given; the fake server
    checks none) at `server`, in `namespace` if given; return `path`."""
    context: dict[str, Any] = {"cluster": "fake", "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": user, "user": {} if token is None else {"token": token}}],
        "contexts": [{"name": "fake", "context": context}],
    }
    path.write_text(json.dumps(document))
    return path
