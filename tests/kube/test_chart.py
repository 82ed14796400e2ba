"""charts/oomwatch with the real helm 4.1: lint, render over every values file, validate each
object, and render what `kubectl kustomize daemonset/` builds.

The chart and the kustomize base are two sources; these tests make them one in effect: for
the same settings they must render the same objects, but for two differences kept on
purpose: helm cannot own the namespace it installs into (the base's Namespace object is not
in the chart; README.md says how to make it), and the Grafana dashboard ConfigMap is the
chart's only (kustomize will not load rules/dashboards/ from outside daemonset/).
"""

from __future__ import annotations

import copy
import re
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.admission import HOST, OWN, admitted, trainer
from support.render import (
    CHART_DIR,
    HELM_LABELS,
    REPO,
    RenderError,
    by_key,
    documents,
    helm,
    helm_template,
    key,
    kustomize,
    validate,
    without_helm_labels,
)

DAEMONSET_DIR = REPO / "daemonset"
VALUES_FILES = sorted(p.name for p in (CHART_DIR / "ci").glob("*-values.yaml"))
PLACEHOLDER = "sha256:" + "0" * 64
DEFAULT_RUNBOOKS = "https://github.com/oomwatch/oomwatch/blob/main/rules/README.md#"
CHART_ONLY = {("ConfigMap", "oomwatch", "oomwatch-dashboard")}
KUSTOMIZE_ONLY = {("Namespace", "", "oomwatch")}


def rendered(values: str | None) -> list[dict[str, Any]]:
    return helm_template(values=[f"ci/{values}"] if values else [])


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    spec: dict[str, Any] = daemonset["spec"]["template"]["spec"]
    return spec


def container(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec = pod_spec(docs)
    (found,) = [c for c in spec["containers"] + spec["initContainers"] if c["name"] == name]
    return found


def alerts(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]


@pytest.mark.parametrize("values", [None, *VALUES_FILES])
def test_helm_lint_passes_strict(values: str | None) -> None:
    args = ["lint", "--strict", str(CHART_DIR)]
    out = helm(*args, *(["--values", str(CHART_DIR / "ci" / values)] if values else []))
    assert "0 chart(s) failed" in out, out


@pytest.mark.parametrize("values", [None, *VALUES_FILES])
def test_every_rendered_object_is_valid(values: str | None) -> None:
    docs = rendered(values)
    by_key(docs)  # no object twice
    for doc in docs:
        validate(doc)
    kinds = {d["kind"] for d in docs}
    assert {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Secret",
        "Service",
        "DaemonSet",
    } <= kinds
    assert "Namespace" not in kinds  # helm installs into a namespace that exists


def equivalent(helm_docs: list[dict[str, Any]], kustomize_docs: list[dict[str, Any]]) -> None:
    chart = by_key(without_helm_labels(d) for d in helm_docs)
    base = by_key(kustomize_docs)
    assert set(chart) - set(base) <= CHART_ONLY, set(chart) - set(base)
    assert set(base) - set(chart) == KUSTOMIZE_ONLY, set(base) - set(chart)
    for shared in set(chart) & set(base):
        assert chart[shared] == base[shared], f"{shared} differs between helm and kustomize"


def user_kustomization(
    tmp_path: Path, components: list[str], settings: dict[str, str] | None = None
) -> Path:
    """A copy of daemonset/ with `components` enabled and settings.yaml changed."""
    base = tmp_path / "daemonset"
    shutil.copytree(DAEMONSET_DIR, base)
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    kustomization["components"] = [f"components/{c}" for c in components]
    (base / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    if settings:
        doc = yaml.safe_load((base / "settings.yaml").read_text())
        doc["data"].update(settings)
        (base / "settings.yaml").write_text(yaml.safe_dump(doc))
    return base


def test_defaults_render_what_kubectl_apply_k_applies() -> None:
    equivalent(rendered(None), kustomize(DAEMONSET_DIR))


@pytest.mark.parametrize(
    "values,components",
    [
        ("annotate-values.yaml", ["annotate"]),
        ("openshift-values.yaml", ["openshift"]),
        ("probe-pod-dirs-values.yaml", ["probe-pod-dirs"]),
    ],
)
def test_optional_parts_render_what_the_kustomize_components_add(
    tmp_path: Path, values: str, components: list[str]
) -> None:
    equivalent(rendered(values), kustomize(user_kustomization(tmp_path, components)))


def test_runbook_base_and_scraper_namespace_are_set_alike(tmp_path: Path) -> None:
    base_url, namespace = "https://wiki.example/sre/oom", "observability"
    chart = helm_template(
        sets=[f"runbookURLBase={base_url}", f"networkPolicy.scraperNamespace={namespace}"]
    )
    built = kustomize(
        user_kustomization(
            tmp_path, [], {"runbookURLBase": base_url, "scraperNamespace": namespace}
        )
    )
    equivalent(chart, built)
    for docs in (chart, built):
        urls = [a["annotations"]["runbook_url"] for a in alerts(docs)]
        assert urls and all(
            u == f"{base_url}#{a['alert'].lower()}" for u, a in zip(urls, alerts(docs), strict=True)
        ), urls
        (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
        (peer,) = policy["spec"]["ingress"][0]["from"]
        assert peer["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": namespace
        }


def test_defaults_keep_the_rule_files_runbook_urls() -> None:
    for docs in (rendered(None), kustomize(DAEMONSET_DIR)):
        assert all(
            a["annotations"]["runbook_url"] == DEFAULT_RUNBOOKS + a["alert"].lower()
            for a in alerts(docs)
        )


def test_the_prometheusrule_holds_the_rule_files_groups() -> None:
    """Apart from the runbook URLs' base, the chart ships rules/oomwatch.rules.yaml as is."""
    rules = yaml.safe_load((REPO / "rules" / "oomwatch.rules.yaml").read_text())
    for values, sets in ((None, []), ("custom-values.yaml", [])):
        docs = helm_template(values=[f"ci/{values}"] if values else [], sets=sets)
        (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
        groups = copy.deepcopy(rule["spec"]["groups"])
        for item in (r for g in groups for r in g["rules"] if "alert" in r):
            anchor = item["annotations"]["runbook_url"].partition("#")[2]
            item["annotations"]["runbook_url"] = DEFAULT_RUNBOOKS + anchor
        assert groups == rules["groups"]


def test_linux_nodes_only_in_both() -> None:
    for docs in (rendered(None), kustomize(DAEMONSET_DIR), rendered("custom-values.yaml")):
        assert pod_spec(docs)["nodeSelector"]["kubernetes.io/os"] == "linux"


def test_operator_off_renders_no_operator_objects() -> None:
    kinds = {d["kind"] for d in rendered("operator-off-values.yaml")}
    assert not kinds & {"PodMonitor", "PrometheusRule"}
    assert "Secret" in kinds  # the scraper's token serves a plain Prometheus too


def test_no_networkpolicy_and_no_dashboard() -> None:
    kinds = {d["kind"] for d in rendered("no-networkpolicy-values.yaml")}
    assert "NetworkPolicy" not in kinds and "ConfigMap" not in kinds


def test_custom_values_reach_every_place_they_name() -> None:
    docs = rendered("custom-values.yaml")
    custom = yaml.safe_load((CHART_DIR / "ci" / "custom-values.yaml").read_text())
    image = custom["image"]
    agent_image = f"{image['repository']}:{image['tag']}@{image['digest']}"
    for name in ("prepare-dirs", "kmsg-relay", "agent"):
        assert container(docs, name)["image"] == agent_image
        assert container(docs, name)["imagePullPolicy"] == "IfNotPresent"
    proxy = container(docs, "kube-rbac-proxy")
    proxy_image = custom["kubeRbacProxy"]["image"]
    assert proxy["image"] == (
        f"{proxy_image['repository']}:{proxy_image['tag']}@{proxy_image['digest']}"
    )
    assert proxy["args"][-1] == custom["kubeRbacProxy"]["extraArgs"][0]
    spec = pod_spec(docs)
    assert spec["imagePullSecrets"] == custom["imagePullSecrets"]
    assert spec["nodeSelector"] == custom["nodeSelector"]
    assert spec["tolerations"] == custom["tolerations"]
    assert spec["affinity"] == custom["affinity"]
    assert spec["priorityClassName"] == custom["priorityClassName"]
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    assert daemonset["spec"]["template"]["metadata"]["annotations"] == custom["podAnnotations"]
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 3
    agent = container(docs, "agent")
    assert agent["resources"] == custom["agent"]["resources"]
    assert agent["args"][-1] == "--probe-allowed-uids=1000"
    probe = custom["probeDir"]
    assert f"--probe-dir={probe}" in agent["args"]
    assert {"name": "probe", "mountPath": probe, "readOnly": True} in agent["volumeMounts"]
    (cgroup,) = [m for m in agent["volumeMounts"] if m["name"] == "cgroup"]
    assert cgroup["recursiveReadOnly"] == "IfPossible"
    assert f'("{probe}", 0, 65532, 0o3777)' in container(docs, "prepare-dirs")["command"][2]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "probe"]
    assert volume["hostPath"]["path"] == probe
    for kind in ("PodMonitor", "PrometheusRule"):  # kube-prometheus-stack's selectors
        (doc,) = [d for d in docs if d["kind"] == kind]
        assert doc["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["spec"]["podMetricsEndpoints"][0]["interval"] == "30s"
    (dashboard,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "Kubernetes"}
    assert all(
        a["annotations"]["runbook_url"].startswith(custom["runbookURLBase"] + "#")
        for a in alerts(docs)
    )


def test_the_dashboard_configmap_is_the_dashboard_file() -> None:
    (dashboard,) = [d for d in rendered(None) if d["kind"] == "ConfigMap"]
    text = (REPO / "rules" / "dashboards" / "oomwatch.json").read_text()
    assert dashboard["data"]["oomwatch.json"] == text.rstrip("\n")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_another_namespace_is_followed_everywhere_and_names_stay_fixed() -> None:
    """Object names never follow the release name (the alerts select job and DaemonSet
    `oomwatch`); the namespace reaches every reference to the agent's service account."""
    docs = helm_template(
        values=["ci/annotate-values.yaml"], release="oom", namespace="platform-oom"
    )
    for doc in docs:
        validate(doc)
        assert doc["metadata"].get("namespace", "platform-oom") == "platform-oom" or (
            doc["kind"] == "ConfigMap"
        )
    assert {key(d)[2] for d in docs} == {key(d)[2] for d in rendered("annotate-values.yaml")}
    subjects = [s for d in docs if d["kind"] == "ClusterRoleBinding" for s in d["subjects"]]
    assert subjects and all(s["namespace"] == "platform-oom" for s in subjects)
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    (condition,) = policy["spec"]["matchConditions"]
    assert "'system:serviceaccount:platform-oom:oomwatch'" in condition["expression"]
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["platform-oom"]}


def test_the_probe_mount_policy_follows_the_namespace_and_probe_dir() -> None:
    """probePodDirs.enabled: --probe-pod-dirs, and a policy that exempts the release's
    namespace (the agent mounts the whole directory) and guards probeDir, not the default."""
    docs = helm_template(
        values=["ci/probe-pod-dirs-values.yaml"],
        sets=["probeDir=/run/ml/probe"],
        namespace="platform-oom",
    )
    assert "--probe-pod-dirs" in container(docs, "agent")["args"]
    assert "--probe-pod-dirs" not in container(rendered(None), "agent")["args"]
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    agent_pod = {"kind": "Pod", **daemonset["spec"]["template"]}
    assert admitted(agent_pod, namespace="platform-oom", policy=policy)
    assert not admitted(agent_pod, namespace="ml", policy=policy)
    for path in ("/run/ml/probe", "/var/run/ml/probe"):
        volume = {"hostPath": {"path": path}}
        assert admitted(trainer(volume, OWN), policy=policy)
        assert not admitted(trainer(volume, {}), policy=policy)
    assert admitted(trainer(HOST, {}), policy=policy)  # the default directory is not probeDir


def test_every_object_carries_helms_labels_and_only_the_name_selects() -> None:
    for doc in rendered("annotate-values.yaml"):
        if doc["kind"] == "CustomResourceDefinition":
            continue  # crds/ is installed as is: Helm templates no CRD (nor deletes one)
        assert doc["metadata"]["labels"].keys() >= HELM_LABELS, key(doc)
    (daemonset,) = [d for d in rendered(None) if d["kind"] == "DaemonSet"]
    assert daemonset["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "oomwatch"}


@pytest.mark.parametrize(
    "setting,complaint",
    [
        ("image.digest=latest", "/image/digest"),
        ("image.digest=sha256:" + "0" * 64, "/image/digest"),
        ("kubeRbacProxy.image.digest=sha256:" + "0" * 64, "/kubeRbacProxy/image/digest"),
        ("runbookURLBase=https://wiki.example/page#section", "/runbookURLBase"),
        ("grafanaDashboard.labels.grafana_dashboard=1", "want string"),
        ("cgroupRecursiveReadOnly=Disabled", "/cgroupRecursiveReadOnly"),
        ("agnet.resources.limits.memory=1Gi", "agnet"),
    ],
)
def test_the_schema_refuses_bad_values(setting: str, complaint: str) -> None:
    with pytest.raises(RenderError, match=re.escape(complaint)):
        helm_template(sets=[setting])


def test_clusters_older_than_1_30_are_refused() -> None:
    """ValidatingAdmissionPolicy v1 (annotate) and the recursiveReadOnly field came in 1.30."""
    with pytest.raises(RenderError, match="kubeVersion"):
        helm("template", "oomwatch", str(CHART_DIR), "--kube-version", "1.29.9")
    assert documents(helm("template", "oomwatch", str(CHART_DIR), "--kube-version", "1.30.0"))


def test_the_packaged_chart_carries_the_linked_files(tmp_path: Path) -> None:
    """files/ links to rules/, the dashboard and the admission policy; `helm package`
    must store their contents, and the package renders as the directory does."""
    helm("package", str(CHART_DIR), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("oomwatch-*.tgz")
    with tarfile.open(package) as archive:
        names = archive.getnames()
        rules = archive.extractfile("oomwatch/files/oomwatch.rules.yaml")
        assert rules is not None
        assert rules.read().decode() == (REPO / "rules" / "oomwatch.rules.yaml").read_text()
    assert not any(n.startswith("oomwatch/ci/") for n in names)  # .helmignore
    for values in ("annotate-values.yaml", "custom-values.yaml"):
        assert helm_template(chart=package, values=[f"ci/{values}"]) == rendered(values)


def test_notes_tell_what_is_left_to_do() -> None:
    """Images by tag only and an empty selector label are said at install time."""
    notes = helm("install", "oomwatch", str(CHART_DIR), "--dry-run=client", "-n", "oomwatch")
    assert "image.digest" in notes and "selectorLabels" in notes
    custom = helm(
        "install",
        "oomwatch",
        str(CHART_DIR),
        "--dry-run=client",
        "-n",
        "oomwatch",
        "--values",
        str(CHART_DIR / "ci" / "custom-values.yaml"),
    )
    assert "image.digest" not in custom.partition("NOTES:")[2]
    assert documents(notes.partition("MANIFEST:")[2].partition("NOTES:")[0])


def test_no_agent_on_fargate_or_virtual_kubelet_nodes_by_default() -> None:
    """As prometheus-node-exporter's chart: nodes no DaemonSet pod can run on are excluded."""
    for docs in (rendered(None), kustomize(DAEMONSET_DIR)):
        terms = pod_spec(docs)["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        (term,) = terms
        excluded = {(e["key"], tuple(e["values"])) for e in term["matchExpressions"]}
        assert all(e["operator"] == "NotIn" for e in term["matchExpressions"])
        assert excluded == {
            ("eks.amazonaws.com/compute-type", ("fargate",)),
            ("type", ("virtual-kubelet",)),
        }


def test_alerts_can_be_turned_off_one_by_one() -> None:
    every = [a["alert"] for a in alerts(rendered(None))]
    kept = [
        a["alert"]
        for a in alerts(
            helm_template(sets=["prometheusOperator.disabledAlerts={NodeOOM,OOMWatchAgentDown}"])
        )
    ]
    assert kept == [a for a in every if a not in ("NodeOOM", "OOMWatchAgentDown")]
    assert "OOMKillDetected" in kept
    with pytest.raises(RenderError, match="NodeOMM is no alert"):
        helm_template(sets=["prometheusOperator.disabledAlerts={NodeOMM}"])


def test_pod_labels_reach_the_pods_only_and_cannot_take_the_selector() -> None:
    docs = helm_template(sets=["podLabels.team=sre"])
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    assert daemonset["spec"]["template"]["metadata"]["labels"] == {
        "app.kubernetes.io/name": "oomwatch",
        "team": "sre",
    }
    assert daemonset["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "oomwatch"}
    with pytest.raises(RenderError, match="podLabels"):
        helm_template(sets=["podLabels.app\\.kubernetes\\.io/name=other"])
