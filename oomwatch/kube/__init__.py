"""Kubernetes integration: node-scoped pod cache, enrichment, Events, annotations,
`OOMIncident` objects, and the incidents only the pod status shows (memory evictions,
OOMKilled without a kernel kill).

The package's names load lazily: the plugin's zipapp imports the pure modules
(`oomwatch.kube.oomincident`, `oomwatch.kube.summary`) and has no Kubernetes client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oomwatch.kube.integration import KubeIntegration, KubeSink, default_api_client
    from oomwatch.kube.pods import PodInfo, decode_pod

__all__ = ["KubeIntegration", "KubeSink", "PodInfo", "decode_pod", "default_api_client"]
_HOMES = {
    "KubeIntegration": "oomwatch.kube.integration",
    "KubeSink": "oomwatch.kube.integration",
    "default_api_client": "oomwatch.kube.integration",
    "PodInfo": "oomwatch.kube.pods",
    "decode_pod": "oomwatch.kube.pods",
}


def __getattr__(name: str) -> Any:
    import importlib

    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'oomwatch.kube' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
