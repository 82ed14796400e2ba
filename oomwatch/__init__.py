"""oomwatch: node-level OOM diagnostics for Kubernetes."""

__version__ = "0.1.0"
