"""`kubectl oomwatch` end to end through real kubectl 1.33: `report TYPE/NAME` prints the
post-mortem from the `OOMIncident` objects the two nodes' agents wrote (never an exec); `top`
answers what died of memory, where and why, from the Events the agents sent."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from support.fleet import TRAINER, WEB_B, Cluster, plugin_env

from oomwatch.fleet import plugin


def _kubectl(kubectl: str, cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl, "oomwatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=plugin_env(kubectl, cluster.kubeconfig),
        check=False,
    )


def _no_exec(cluster: Cluster) -> None:
    assert not [r for r in cluster.api.requests if r[2] == "pods/exec"]


def test_report_reads_the_pods_oomincident(kubectl: str, cluster: Cluster, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = _kubectl(kubectl, cluster, "report", f"pod/{WEB_B.name}", "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert f"the OOMIncidents of pod/{WEB_B.name} in namespace shop" in done.stdout
    assert "2 kill(s) of Deployment/web container app on node node-b" in done.stdout
    assert "VERDICT" in done.stdout and "limit-container" in done.stdout
    assert "web-7d4b9c8f6d-x2x9z" not in done.stdout  # node-a's pod: its own object
    assert "limit-container" in page.read_text()  # written here, on the user's machine
    _no_exec(cluster)


def test_report_of_a_deleted_pod_reads_its_objects(kubectl: str, cluster: Cluster) -> None:
    cluster.api.delete_pod(TRAINER.namespace, TRAINER.name)
    done = _kubectl(kubectl, cluster, "report", "trainer-0", "--details", "-n", "ml")
    assert done.returncode == 0, done.stderr
    assert "warned 4m10s before the kill (MemoryLimitApproaching" in done.stdout
    assert "leak-trend" in done.stdout or "grew steadily" in done.stdout


def test_report_of_a_workload_and_of_a_node(kubectl: str, cluster: Cluster) -> None:
    done = _kubectl(kubectl, cluster, "report", "-n", "shop", "deploy/web", "-o", "json")
    assert done.returncode == 0, done.stderr
    items = json.loads(done.stdout)["items"]
    assert sorted((o["node"], o["kills"]) for o in items) == [("node-a", 3), ("node-b", 2)]
    done = _kubectl(kubectl, cluster, "report", "node/node-b", "-o", "wide")
    assert done.returncode == 0, done.stderr
    rows = done.stdout.splitlines()
    assert rows[0].split()[:3] == ["NAMESPACE", "NAME", "WORKLOAD"]
    assert {r.split()[0] for r in rows[1:]} == {"shop", "ml"}
    done = _kubectl(kubectl, cluster, "report", "statefulset/trainer", "-A", "-o", "yaml")
    assert done.returncode == 0, done.stderr
    assert '"workload": "StatefulSet/trainer"' in done.stdout


def test_report_says_what_it_could_not_find(kubectl: str, cluster: Cluster) -> None:
    done = _kubectl(kubectl, cluster, "report", "-n", "shop", "no-such-pod")
    assert done.returncode == 1
    assert "No OOMIncident about pod/no-such-pod in namespace shop." in done.stdout
    done = _kubectl(kubectl, cluster, "report", "node/Bad_Node")
    assert done.returncode == 2 and "not a valid node name" in done.stderr


def test_flags_before_the_command_work_as_after_it(kubectl: str, cluster: Cluster) -> None:
    """kubectl users type `kubectl oomwatch -n ml report pod/x`: the same report."""
    for before, after in (
        (["-n", "ml", "report"], ["report", "trainer-0", "-n", "ml"]),
        (["--namespace=ml", "-ojson", "report"], ["report", "trainer-0", "-n", "ml", "-o", "json"]),
        (["-A", "-o", "yaml", "report"], ["report", "trainer-0", "-A", "-o", "yaml"]),
    ):
        first = _kubectl(kubectl, cluster, *before, "trainer-0")
        second = _kubectl(kubectl, cluster, *after)
        assert first.returncode == second.returncode == 0, first.stderr
        assert first.stdout == second.stdout
        assert "StatefulSet/trainer" in first.stdout
    top = _kubectl(kubectl, cluster, "-n", "ml", "-o", "json", "top")
    assert top.returncode == 0, top.stderr
    assert {r["namespace"] for r in json.loads(top.stdout)["rows"]} == {"ml"}
    wrong = _kubectl(kubectl, cluster, "-o", "yaml", "top")  # each command checks its own
    assert wrong.returncode == 2 and "invalid choice: 'yaml'" in wrong.stderr


def test_hoisting_leaves_the_global_flags_and_what_follows_the_command() -> None:
    assert plugin.hoist_flags(["--context", "report", "-n", "a", "top", "-n", "b"]) == [
        "--context",
        "report",
        "top",
        "-n",
        "a",
        "-n",
        "b",
    ]
    assert plugin.hoist_flags(["report", "-o", "top"]) == ["report", "-o", "top"]
    assert plugin.hoist_flags(["-n", "ns"]) == ["-n", "ns"]  # argparse names what is missing


def _rows(out: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    data = json.loads(out)
    return {(r["namespace"], r["workload"], r["scope"]): r for r in data["rows"]}


def test_top_from_the_events_of_two_nodes(kubectl: str, cluster: Cluster) -> None:
    done = _kubectl(kubectl, cluster, "top", "--since", "1h", "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = _rows(done.stdout)
    web = rows[("shop", "Deployment/web", "container")]
    assert web["kills"] == 5 and web["nodes"] == ["node-a", "node-b"]
    assert len(web["pods"]) == 2 and web["container"] == "app"
    assert web["findings"]["limit-container"] == 5
    assert web["recommendation"].startswith("Set the container's memory limit to at least")
    trainer = rows[("ml", "StatefulSet/trainer", "container")]
    assert trainer["kills"] == 1 and trainer["warnings"] == 1
    assert trainer["lead_times_seconds"] == [250.0]
    assert trainer["findings"].get("leak-trend") == 1
    assert "larger limit only delays" in trainer["recommendation"]
    etl = rows[("batch", "Job/etl-28391734", "pod")]
    assert etl["kills"] == 1 and etl["findings"].get("limit-pod") == 1
    node = rows[("", "Node/node-b", "global")]
    assert node["kills"] == 1 and node["nodes"] == ["node-b"]


def test_top_reads_as_a_table(kubectl: str, cluster: Cluster) -> None:
    done = _kubectl(kubectl, cluster, "top", "--since", "1h")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("OOM kills since ")
    assert lines[0].endswith(": 8 in 4 workload(s) on 2 node(s)")
    assert "OOMIncident objects" in lines[1]
    header = next(line for line in lines if line.startswith("NAMESPACE"))
    assert "FINDINGS" in header and "TOP RECOMMENDATION" in header
    web = next(line for line in lines if "Deployment/web" in line)
    assert " 5 " in web and "limit-container" in web
    trainer = next(line for line in lines if "StatefulSet/trainer" in line)
    assert "1 ~4m ahead" in trainer


def test_top_pages_through_events_and_filters_a_namespace(
    kubectl: str, cluster: Cluster, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(plugin, "PAGE", 2)
    monkeypatch.setenv("KUBECTL", kubectl)
    assert (
        plugin.main(["--kubeconfig", str(cluster.kubeconfig), "top", "-o", "json", "--since", "2h"])
        == 0
    )
    assert sum(r["kills"] for r in json.loads(capsys.readouterr().out)["rows"]) == 8
    continues = [p for v, _, r, p in cluster.api.requests if r == "events" and v == "list"]
    assert len(continues) == 3  # 6 Events, 2 a page
    assert (
        plugin.main(["--kubeconfig", str(cluster.kubeconfig), "top", "-n", "ml", "-o", "json"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["workload"] for r in rows] == ["StatefulSet/trainer"]


def test_krew_manifest_installs_this_plugin() -> None:
    import yaml

    repo = Path(__file__).resolve().parents[2]
    manifest = yaml.safe_load((repo / "plugins" / "oomwatch.yaml").read_text())
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "oomwatch"
    for entry in manifest["spec"]["platforms"]:
        assert entry["bin"] == "kubectl-oomwatch"
