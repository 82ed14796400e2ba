"""Kubernetes integration: node-scoped pod cache, enrichment, Events, annotations, and the
incidents only the pod status shows (memory evictions, OOMKilled without a kernel kill)."""

from oomwatch.kube.integration import KubeIntegration, KubeSink, default_api_client
from oomwatch.kube.pods import PodInfo, decode_pod

__all__ = ["KubeIntegration", "KubeSink", "PodInfo", "decode_pod", "default_api_client"]
