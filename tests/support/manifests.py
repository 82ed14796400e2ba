"""Reading `daemonset/`: every manifest document, and the verbs the ClusterRoles grant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DAEMONSET_DIR = Path(__file__).resolve().parents[2] / "daemonset"
ANNOTATE_DIR = DAEMONSET_DIR / "components" / "annotate"


def manifest_files() -> list[Path]:
    return sorted(p for p in DAEMONSET_DIR.rglob("*.yaml") if p.name != "kustomization.yaml")


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _rules(path: Path) -> set[tuple[str, str, str]]:
    grants: set[tuple[str, str, str]] = set()
    for doc in documents(path):
        if doc["kind"] != "ClusterRole":
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        grants.add((verb, group, resource))
    return grants


def granted_verbs(annotate: bool) -> set[tuple[str, str, str]]:
    """(verb, apiGroup, resource) granted by the base ClusterRole (+ the annotate component)."""
    grants = _rules(DAEMONSET_DIR / "clusterrole.yaml")
    if annotate:
        grants |= _rules(ANNOTATE_DIR / "clusterrole-annotate.yaml")
    return grants
