"""A namespace viewer reads a full diagnosis through real kubectl 1.33: `get oomincidents`
(the printer columns), `describe oomincident` (which reads like the text report) and
`kubectl oomwatch report`, with no grant but what the `view` role aggregates; and forged
objects print inert."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from support.fleet import WEB_B, Cluster, plugin_env
from support.manifests import DAEMONSET_DIR, documents

VIEWER = "jane"  # a namespace viewer


def _viewer(cluster: Cluster, tmp_path: Path, namespace: str = "shop") -> Path:
    """A user whose only grants are the reader ClusterRole's, bound in `namespace`, and the
    Events `view` also lets it list there."""
    (role,) = documents(DAEMONSET_DIR / "clusterrole-view.yaml")
    assert role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    grants = {
        (verb, group, resource, namespace)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    cluster.api.users[VIEWER] = grants | {("list", "", "events", namespace)}
    path = tmp_path / "viewer.kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "viewer",
                "clusters": [{"name": "fake", "cluster": {"server": cluster.api.url}}],
                "users": [{"name": "viewer", "user": {"as": VIEWER}}],
                "contexts": [
                    {
                        "name": "viewer",
                        "context": {"cluster": "fake", "user": "viewer", "namespace": namespace},
                    }
                ],
            }
        )
    )
    return path


def _run(kubectl: str, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=plugin_env(kubectl, kubeconfig),
        check=False,
    )


def test_a_namespace_viewer_reads_the_full_diagnosis(
    kubectl: str, cluster: Cluster, tmp_path: Path
) -> None:
    config = _viewer(cluster, tmp_path)
    got = _run(kubectl, config, "get", "oomincidents")
    assert got.returncode == 0, got.stderr
    header, *rows = got.stdout.splitlines()
    assert header.split() == ["NAME", "WORKLOAD", "CONTAINER", "KILLS", "LIMIT", "VERDICT", "AGE"]
    web_b = next(r for r in rows if r.split()[3] == "2")
    assert web_b.split()[1:6] == ["Deployment/web", "app", "2", "256Mi", "limit-container"]
    name = web_b.split()[0]
    described = _run(kubectl, config, "describe", "oomincident", name)
    assert described.returncode == 0, described.stderr
    stored = cluster.api.oomincidents[("shop", name)]
    assert stored["verdict"] in described.stdout.replace("\n ", " ").replace("  ", " ") or (
        stored["verdict"][:60] in described.stdout
    )
    assert "Limit - Container" in described.stdout or "limit-container" in described.stdout
    report = _run(kubectl, config, "oomwatch", "report", f"pod/{WEB_B.name}")
    assert report.returncode == 0, report.stderr
    # describe reads like the report: its first field is the report's text, line by line,
    # with the verdict and the advice worded as the report words them.
    lines = described.stdout.splitlines()
    first = next(n for n, line in enumerate(lines) if line.startswith(("Analysis:", "API")))
    assert lines[first].startswith("Analysis:") and "== OOM 1 of 1" in lines[first]
    for label in ("VERDICT", "advice"):
        (worded,) = [line for line in report.stdout.splitlines() if line.startswith(f"  {label} ")]
        assert worded in lines, label
    assert "Set the container's memory limit to at least" in report.stdout
    assert stored["verdict"] in report.stdout
    assert "findings:" in report.stdout and "limit-container" in report.stdout
    # ... and nothing of another namespace.
    other = _run(kubectl, config, "get", "oomincidents", "-n", "ml")
    assert other.returncode != 0 and "Forbidden" in other.stderr
    assert not [r for r in cluster.api.requests if r[2] == "pods/exec"]


def test_forged_objects_print_inert(kubectl: str, cluster: Cluster, tmp_path: Path) -> None:
    """Someone with write access forges an object whose strings carry terminal escapes and
    line breaks: the plugin prints them as escapes, in their own cells."""
    obj = dict(next(o for (ns, _), o in cluster.api.oomincidents.items() if ns == "shop"))
    forged = {
        **obj,
        "metadata": {
            **obj["metadata"],
            "name": "forged",
            "managedFields": [{"manager": "kubectl-edit", "operation": "Update"}],
        },
        "kills": 1000,
        "workload": "Deployment/web\x1b[2J\nshop  Deployment/evil  app  99",
        "pod": WEB_B.name,
        "verdict": "all fine\x1b]0;owned\x07\r\nVERDICT   nothing to see",
        "incident": {**obj["incident"], "verdict": "ok\x1b[31m\nVERDICT   forged row"},
    }
    cluster.api.oomincidents[("shop", "forged")] = forged
    config = _viewer(cluster, tmp_path)
    for args in (
        ("report", f"pod/{WEB_B.name}"),
        ("report", f"pod/{WEB_B.name}", "-o", "wide"),
        ("report", f"pod/{WEB_B.name}", "-o", "yaml"),
    ):
        done = _run(kubectl, config, "oomwatch", *args)
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout and "\r" not in done.stdout
        assert "\\x1b" in done.stdout or "\\u001b" in done.stdout
        assert not any(line.startswith("VERDICT   forged") for line in done.stdout.splitlines())
        assert "shop  Deployment/evil" not in done.stdout.splitlines()
    # `top` counts what agents wrote: the forged object's 1000 kills are not among them.
    top = _run(kubectl, cluster.kubeconfig, "oomwatch", "top", "--since", "1h", "-o", "json")
    assert top.returncode == 0, top.stderr
    assert sum(r["kills"] for r in json.loads(top.stdout)["rows"]) == 8
