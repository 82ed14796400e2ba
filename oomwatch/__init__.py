"""oomwatch: node-level OOM diagnostics for Kubernetes."""

# The one place the version is written: pyproject.toml reads it (dynamic), and the chart's
# version and appVersion, the kustomize image tag and the documented image tags are checked
# equal to it by tests/test_release.py.
__version__ = "0.2.0"
