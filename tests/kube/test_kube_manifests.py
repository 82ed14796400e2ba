"""`daemonset/`: every manifest and what `kubectl kustomize` builds from it, validated
(kube_render.validate: Kubernetes 1.33 schemas, the Prometheus operator's CRD schemas), and
the design rules."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.manifests import ANNOTATE_DIR, DAEMONSET_DIR, documents, manifest_files
from support.render import kustomize, validate

from oomwatch import __version__

REPO = DAEMONSET_DIR.parent


@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: str(p.relative_to(DAEMONSET_DIR)))
def test_manifest_validates_against_the_kubernetes_schema(path: Path) -> None:
    docs = documents(path)
    assert docs, f"{path} has no objects"
    for doc in docs:
        validate(doc)


def one(kind: str, name: str = "oomwatch") -> dict[str, Any]:
    found = [
        d
        for p in manifest_files()
        for d in documents(p)
        if d["kind"] == kind and d["metadata"]["name"] == name
    ]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def containers() -> dict[str, dict[str, Any]]:
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"] + spec["initContainers"]}


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DAEMONSET_DIR / "kustomization.yaml").read_text())
    top_level = {p.name for p in DAEMONSET_DIR.glob("*.yaml") if p.name != "kustomization.yaml"}
    listed = set(kustomization["resources"])
    assert top_level - {"prometheusrule.yaml"} <= listed
    assert "prometheusrule.yaml" in listed  # the alerting rules ship with the agent
    for directory in sorted((DAEMONSET_DIR / "components").iterdir()):
        component = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert component["kind"] == "Component"
        listed = set(component["resources"])
        assert listed == {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}


def test_annotate_component_adds_the_flag_to_the_agent() -> None:
    component = yaml.safe_load((ANNOTATE_DIR / "kustomization.yaml").read_text())
    (patch,) = component["patches"]
    (op,) = yaml.safe_load(patch["patch"])
    index = int(op["path"].split("/")[5])
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    assert spec["containers"][index]["name"] == "agent"
    assert op["value"] == "--annotate-pods"


def user_kustomization(tmp_path: Path, annotate: bool) -> Path:
    """`daemonset/` itself, or a user's own kustomization enabling the annotate component."""
    if not annotate:
        return DAEMONSET_DIR
    base = os.path.relpath(DAEMONSET_DIR, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [base],
                "components": [f"{base}/components/annotate"],
            }
        )
    )
    return tmp_path


@pytest.mark.parametrize("annotate", [False, True])
def test_kustomize_builds_valid_objects(tmp_path: Path, annotate: bool) -> None:
    """What `kubectl apply -k` would send (real kubectl 1.33), with and without the annotate
    component."""
    docs = kustomize(user_kustomization(tmp_path, annotate))
    for doc in docs:
        validate(doc)
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    pod_spec = daemonset["spec"]["template"]["spec"]
    agent = next(c for c in pod_spec["containers"] if c["name"] == "agent")
    assert ("--annotate-pods" in agent["args"]) is annotate
    # real tags (a placeholder digest would fail every pull); users pin digests themselves
    assert {c["image"] for c in pod_spec["containers"] + pod_spec["initContainers"]} == {
        f"oomwatch:{__version__}",
        "quay.io/brancz/kube-rbac-proxy:v0.19.1",
    }
    roles = {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"}
    base = {
        "oomwatch",
        "oomwatch-kube-rbac-proxy",
        "oomwatch-metrics-reader",
        "oomwatch-incidents-view",
    }
    assert roles == (base | {"oomwatch-annotate"} if annotate else base)
    kinds = {d["kind"] for d in docs}
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRoleBinding",
        "DaemonSet",
        "Service",
        "NetworkPolicy",
        "PodMonitor",
        "PrometheusRule",
        "CustomResourceDefinition",
    } <= kinds
    assert "ConfigMap" not in kinds  # settings.yaml is local config, consumed by the build
    policies = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert (policies <= kinds) is annotate  # the patch grant never ships without its policy


def test_agent_runs_unprivileged_and_only_the_relay_is_privileged() -> None:
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    assert "hostPID" not in spec and "hostNetwork" not in spec
    agent = containers()["agent"]["securityContext"]
    assert agent["runAsNonRoot"] is True and agent["runAsUser"] != 0
    assert agent["capabilities"] == {"drop": ["ALL"]}
    assert agent["readOnlyRootFilesystem"] is True
    assert agent["allowPrivilegeEscalation"] is False
    privileged = [
        name for name, c in containers().items() if c.get("securityContext", {}).get("privileged")
    ]
    assert privileged == ["kmsg-relay"]
    proxy = containers()["kube-rbac-proxy"]["securityContext"]
    assert proxy["runAsNonRoot"] is True and proxy["capabilities"] == {"drop": ["ALL"]}
    assert proxy["readOnlyRootFilesystem"] is True and proxy["allowPrivilegeEscalation"] is False
    relay = containers()["kmsg-relay"]
    assert relay["command"] == ["python", "-m", "oomwatch.kmsg_relay"]
    assert {m["mountPath"] for m in relay["volumeMounts"]} == {"/dev/kmsg", "/run/oomwatch"}
    prepare = containers()["prepare-dirs"]["securityContext"]
    assert prepare["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}


def test_daemonset_mounts_env_probe_and_scheduling() -> None:
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["kmsg"]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    assert volumes["cgroup"]["hostPath"]["path"] == "/sys/fs/cgroup"
    assert volumes["state"]["hostPath"]["path"] == "/var/lib/oomwatch"
    assert volumes["probe"]["hostPath"]["path"] == "/var/run/oomwatch/probe"
    agent = containers()["agent"]
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert mounts["cgroup"] == {
        "name": "cgroup",
        "mountPath": "/host/sys/fs/cgroup",
        "readOnly": True,
        "recursiveReadOnly": "Enabled",
    }
    assert mounts["relay"]["readOnly"] is True
    args = agent["args"]
    assert args[0] == "run" and "--node-name=$(NODE_NAME)" in args
    assert "--kmsg=/run/oomwatch/kmsg.fifo" in args
    relay_args = containers()["kmsg-relay"]["args"]
    assert relay_args[relay_args.index("--fifo") + 1] == "/run/oomwatch/kmsg.fifo"
    (env,) = agent["env"]
    assert env == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    probe = agent["livenessProbe"]["httpGet"]
    assert probe == {"path": "/healthz", "port": "health"}
    assert agent["ports"] == [{"name": "health", "containerPort": 9718, "protocol": "TCP"}]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}  # never on Windows nodes
    assert spec["priorityClassName"] == "system-node-critical"
    assert agent["resources"]["requests"] == {"cpu": "20m", "memory": "80Mi"}


def test_podmonitor_scrapes_the_agent_with_honor_labels() -> None:
    monitor = one("PodMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["honorLabels"] is True
    assert endpoint["path"] == "/metrics" and endpoint["port"] == "metrics"
    # kube-rbac-proxy: TLS with its self-signed certificate, and a token allowed /metrics
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    credentials = endpoint["authorization"]["credentials"]
    secret = one("Secret", credentials["name"])
    assert secret["type"] == "kubernetes.io/service-account-token" and credentials["key"] == "token"
    scraper = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    reader = one("ClusterRoleBinding", "oomwatch-metrics-reader")
    assert reader["subjects"] == [
        {"kind": "ServiceAccount", "name": scraper, "namespace": "oomwatch"}
    ]
    assert one("ClusterRole", "oomwatch-metrics-reader")["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    pod_labels = one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert pod_labels[monitor["spec"]["jobLabel"]] == "oomwatch"  # up{job="oomwatch"}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["oomwatch"]}
    # the alerts name the node (`node` target label), as the plain scrape config in
    # rules/README.md also adds it
    assert endpoint["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
    ]


def test_report_commands_in_alerts_and_docs_read_the_agents_store() -> None:
    """`oomwatch report` without --store reads /dev/kmsg, which the agent container cannot."""
    args = containers()["agent"]["args"]
    (state_dir,) = [a.split("=", 1)[1] for a in args if a.startswith("--state-dir=")]
    texts = {
        path: path.read_text()
        for path in (
            REPO / "rules" / "oomwatch.rules.yaml",
            REPO / "rules" / "README.md",
            DAEMONSET_DIR / "README.md",
            REPO / "README.md",
        )
    }
    stores = {
        str(path.relative_to(REPO)): set(re.findall(r"--store\s+(\S+?)[`\s]", text))
        for path, text in texts.items()
    }
    assert all(found <= {state_dir} for found in stores.values()), (state_dir, stores)
    alert_commands = re.findall(
        r"`oomwatch report[^`]*`", texts[REPO / "rules" / "oomwatch.rules.yaml"]
    )
    assert alert_commands and all("--store" in c for c in alert_commands), alert_commands


def test_service_account_is_bound_to_its_cluster_roles() -> None:
    for name in ("oomwatch", "oomwatch-annotate", "oomwatch-kube-rbac-proxy"):
        binding = one("ClusterRoleBinding", name)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": name,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "oomwatch", "namespace": "oomwatch"}
        ]
    assert one("DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"] == "oomwatch"


def test_prometheusrule_is_structurally_sound_when_present() -> None:
    path = DAEMONSET_DIR / "prometheusrule.yaml"
    if not path.exists():
        pytest.skip("daemonset/prometheusrule.yaml not written yet (alerting engineer)")
    (rule,) = documents(path)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["namespace"] == "oomwatch"
    for group in rule["spec"]["groups"]:
        assert group["name"] and group["rules"]
        for item in group["rules"]:
            assert ("alert" in item) != ("record" in item) and item["expr"]


def test_the_token_is_mounted_only_where_the_api_is_used() -> None:
    """The privileged relay and the init step never hold the service-account token."""
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    (volume,) = [v for v in spec["volumes"] if v["name"] == "api-token"]
    sources = volume["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    holders = {
        name
        for name, c in containers().items()
        if any(m["name"] == "api-token" for m in c.get("volumeMounts", []))
    }
    assert holders == {"agent", "kube-rbac-proxy"}
    for name in holders:
        (mount,) = [m for m in containers()[name]["volumeMounts"] if m["name"] == "api-token"]
        assert mount["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
        assert mount["readOnly"] is True


def test_metrics_reach_scrapers_only_through_kube_rbac_proxy() -> None:
    agent_args = containers()["agent"]["args"]
    assert "--metrics-address=127.0.0.1:9717" in agent_args  # loopback: the pod only
    assert "--health-address=0.0.0.0:9718" in agent_args
    proxy = containers()["kube-rbac-proxy"]
    assert "--upstream=http://127.0.0.1:9717/" in proxy["args"]
    assert "--secure-listen-address=[$(POD_IP)]:9717" in proxy["args"]
    assert "--allow-paths=/metrics" in proxy["args"]
    assert proxy["ports"] == [{"name": "metrics", "containerPort": 9717, "protocol": "TCP"}]
    assert one("Service")["spec"]["ports"][0]["targetPort"] == "metrics"
    policy = one("NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]  # not the health port
    assert (
        policy["podSelector"]["matchLabels"].items()
        <= one("DaemonSet")["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_documented_overlay_gives_the_operator_objects_a_selector_label(
    tmp_path: Path,
) -> None:
    """daemonset/README.md's overlay for kube-prometheus-stack's `release:` selectors."""
    blocks = re.findall(r"```yaml\n(.*?)```", (DAEMONSET_DIR / "README.md").read_text(), re.S)
    (overlay,) = [yaml.safe_load(b) for b in blocks if "PodMonitor|PrometheusRule" in b]
    overlay["resources"] = [os.path.relpath(DAEMONSET_DIR, tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    docs = kustomize(tmp_path)
    labelled = {d["kind"] for d in docs if d["metadata"]["labels"].get("release")}
    assert labelled == {"PodMonitor", "PrometheusRule"}
