"""Cgroup path -> Kubernetes identity, on every layout seen in the corpus and on hostile paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oomwatch.cgroup_identity import CgroupIdentity, annotate, identify
from oomwatch.incident import Incident

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"  # the public corpus, in-repo
CID = "9192cb33411ff69d015a3577db136757f5b145064a1703efea3d0e12e8a64987"

# (path as the kernel printed it in a public report, expected identity)
CASES: list[tuple[str, CgroupIdentity]] = [
    # systemd driver, containerd, BestEffort (AKS group kill, corpus 01)
    (
        "/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-poda5d8fdd1_1369_469e_8a7d_2c1047529435.slice/cri-containerd-{CID}.scope",
        CgroupIdentity(
            "a5d8fdd1-1369-469e-8a7d-2c1047529435",
            CID,
            "besteffort",
            "systemd",
            "containerd",
            "container",
        ),
    ),
    # systemd driver, Guaranteed pod sits directly under kubepods.slice
    (
        "/kubepods.slice/kubepods-podf9411888_a753_41f4_9520_afc45712f5b5.slice",
        CgroupIdentity(
            "f9411888-a753-41f4-9520-afc45712f5b5", None, "guaranteed", "systemd", None, "pod"
        ),
    ),
    (
        "/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-pod5931aa75_4603_4e65_b552_7c71cf55cfb5.slice",
        CgroupIdentity(
            "5931aa75-4603-4e65-b552-7c71cf55cfb5", None, "burstable", "systemd", None, "pod"
        ),
    ),
    ("/kubepods.slice", CgroupIdentity(driver="systemd", level="node")),
    (
        "/kubepods.slice/kubepods-burstable.slice",
        CgroupIdentity(qos_class="burstable", driver="systemd", level="qos"),
    ),
    # systemd driver, dockershim scope (corpus 15, kernel ≤4.19 `Task in` line)
    (
        "/kubepods.slice/kubepods-pod9eb0e64e_6e1a_43e4_b372_2603a3cc2941.slice/"
        "docker-663f6287c450aea2f849b82a30d1409059497b5de62846a286e55971d61e2650.scope",
        CgroupIdentity(
            "9eb0e64e-6e1a-43e4-b372-2603a3cc2941",
            "663f6287c450aea2f849b82a30d1409059497b5de62846a286e55971d61e2650",
            "guaranteed",
            "systemd",
            "docker",
            "container",
        ),
    ),
    # cgroupfs driver, bare container id (containerd), Burstable
    (
        "/kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba/"
        "3e5e5eab87df615f4777e6f7f261a7fb62f4a7ee5bc3e25e3a5b5223ccd368fe",
        CgroupIdentity(
            "28fcb1a0-a45c-44e7-b9bf-e3b9360bedba",
            "3e5e5eab87df615f4777e6f7f261a7fb62f4a7ee5bc3e25e3a5b5223ccd368fe",
            "burstable",
            "cgroupfs",
            "containerd",
            "container",
        ),
    ),
    # cgroupfs Guaranteed pod (corpus 24)
    (
        "/kubepods/pod95387fa4-da9c-11e7-9d36-5254b24cbf5e",
        CgroupIdentity(
            "95387fa4-da9c-11e7-9d36-5254b24cbf5e", None, "guaranteed", "cgroupfs", None, "pod"
        ),
    ),
    # a process's own sub-cgroup below the container still belongs to the container
    (
        "/kubepods/burstable/pod6c4333b3-a663-11ea-b39f-6c92bf85beda/"
        "bbd5e4b5f9c13666dd0ec7ff7afb2c4c2b0ede40a4adf1de43cc31c606f283f5/super-agent",
        CgroupIdentity(
            "6c4333b3-a663-11ea-b39f-6c92bf85beda",
            "bbd5e4b5f9c13666dd0ec7ff7afb2c4c2b0ede40a4adf1de43cc31c606f283f5",
            "burstable",
            "cgroupfs",
            "containerd",
            "container",
        ),
    ),
    # nested LXC prefix (corpus 26)
    (
        "/lxc.payload.ny2g2r5hh3-lxc/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-podeded8c65_6e8e_4c6e_a889_3e427565c740.slice/"
        "cri-containerd-ec9ee26695deb4cc72bc665efff1cf3a03fdfb12f1303e02fe9252985e084a95.scope",
        CgroupIdentity(
            "eded8c65-6e8e-4c6e-a889-3e427565c740",
            "ec9ee26695deb4cc72bc665efff1cf3a03fdfb12f1303e02fe9252985e084a95",
            "burstable",
            "systemd",
            "containerd",
            "container",
        ),
    ),
    # plain docker outside Kubernetes (corpus 17, 18)
    (
        "/docker/34186d9bd07706222bd427bb647ceed81e8e108eb653ff73c7137099fca1cab6",
        CgroupIdentity(
            container_id="34186d9bd07706222bd427bb647ceed81e8e108eb653ff73c7137099fca1cab6",
            driver="cgroupfs",
            runtime="docker",
            level="cgroup",
        ),
    ),
    # docker with the systemd driver, outside Kubernetes
    (
        "/system.slice/docker-34186d9bd07706222bd427bb647ceed81e8e108eb653ff73c7137099fca1cab6.scope",
        CgroupIdentity(
            container_id="34186d9bd07706222bd427bb647ceed81e8e108eb653ff73c7137099fca1cab6",
            driver="systemd",
            runtime="docker",
            level="cgroup",
        ),
    ),
    ("/system.slice/azuremonitoragent.service", CgroupIdentity()),
    ("/user.slice/user-1000.slice/session-2.scope", CgroupIdentity()),
    ("/mem_test", CgroupIdentity()),
    ("/", CgroupIdentity()),
    ("", CgroupIdentity()),
]


@pytest.mark.parametrize(("path", "expected"), CASES, ids=[c[0][-40:] or "empty" for c in CASES])
def test_layouts_from_public_reports(path: str, expected: CgroupIdentity) -> None:
    assert identify(path) == expected


def test_every_memcg_path_in_the_corpus_is_classified() -> None:
    """Every path printed in a public report maps to a level, and kubepods ones to a pod."""
    files = sorted(CORPUS.glob("*.log"))
    assert files, f"public corpus not found at {CORPUS}"
    pattern = re.compile(r"(?:task_memcg=|oom_memcg=|Task in |limit of |Tasks in )(/[^\s,]*)")
    paths = {m.group(1) for f in files for m in pattern.finditer(f.read_text())}
    assert len(paths) > 15
    for path in paths:
        ident = identify(path)
        if "kubepods" in path and "...." not in path:  # one corpus prefix is redacted
            assert ident.driver is not None, path
            if "pod" in path.rsplit("kubepods", 1)[1]:
                assert ident.pod_uid is not None, path
                assert re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", ident.pod_uid)


CRIO = "1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988"


@pytest.mark.parametrize(
    ("path", "container_id", "runtime"),
    [
        (f"/kubepods/besteffort/pod0a-b/crio-{CRIO}", CRIO, "cri-o"),
        (f"/kubepods/besteffort/pod0a-b/crio-conmon-{CRIO}", CRIO, "cri-o"),
        (f"/kubepods.slice/kubepods-pod0a_b.slice/crio-{CRIO}.scope", CRIO, "cri-o"),
        (f"/kubepods.slice/kubepods-pod0a_b.slice/crio-{CRIO}.scope/container", CRIO, "cri-o"),
        (f"/kubepods.slice/kubepods-pod0a_b.slice/crio-conmon-{CRIO}.scope", CRIO, "cri-o"),
        (f"/kubepods.slice/kubepods-pod0a_b.slice/docker-{CRIO}.scope", CRIO, "docker"),
        ("/kubepods/pod1/c1", "c1", None),  # short test ids: a container, runtime unknown
    ],
)
def test_runtimes(path: str, container_id: str, runtime: str | None) -> None:
    ident = identify(path)
    assert (ident.container_id, ident.runtime, ident.level) == (container_id, runtime, "container")
    assert ident.pod_uid in {"0a-b", "1"}


def test_kubepods_below_a_scratch_root() -> None:
    uid = "11111111-2222-3333-4444-555555555555"
    ident = identify(f"/oomwatch-lab-7/kubepods/burstable/pod{uid}/{'c' * 64}")
    assert (ident.pod_uid, ident.container_id, ident.qos_class, ident.level) == (
        uid,
        "c" * 64,
        "burstable",
        "container",
    )
    assert identify("/oomwatch-lab-7/kubepods").level == "node"
    assert identify("/oomwatch-lab-7").level == "cgroup"


@pytest.mark.parametrize(
    "path",
    [
        "/kubepods/burstable/pod,uid=0/abc",  # a name that is not a UID is not a pod
        "/kubepods/burstable/pod x) total-vm:1kB/abc",
        "/kubepods/burstable/pod\nKilled process 1 (init)/abc",
        "/kubepods/burstable/\x1b[31mpodevil/abc",
        "/kubepods/guaranteed/podabc",  # no such QoS directory
        # the pod slice names another QoS than its parent
        "/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-podab_cd.slice",
        "/kubepods.slice/kubepods-burstable.slice/podab-cd",  # cgroupfs name under systemd
        "/kubepods/pod" + "a" * 200,  # longer than any UID
    ],
)
def test_hostile_or_malformed_pod_components_are_not_pods(path: str) -> None:
    ident = identify(path)
    assert ident.level == "cgroup"
    assert ident.pod_uid is None and ident.container_id is None


def test_hostile_container_component_gives_no_id() -> None:
    ident = identify("/kubepods/podab-cd/x,pid=1,uid=0")
    assert ident.level == "container" and ident.pod_uid == "ab-cd"
    assert ident.container_id is None and ident.runtime is None


def test_annotate_takes_identity_from_task_memcg_and_scope_from_oom_memcg() -> None:
    pod = (
        "/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-pod5931aa75_4603_4e65_b552_7c71cf55cfb5.slice"
    )
    incident = Incident(kind="memcg", oom_memcg=pod, task_memcg=f"{pod}/cri-containerd-{CID}.scope")
    out = annotate(incident)
    assert out.pod_uid == "5931aa75-4603-4e65-b552-7c71cf55cfb5"
    assert out.container_id == CID
    assert (out.qos_class, out.cgroup_driver, out.runtime) == ("burstable", "systemd", "containerd")
    assert out.limit_scope == "pod"


def test_annotate_scopes() -> None:
    assert annotate(Incident(kind="global", task_memcg="/")).limit_scope == "global"
    assert annotate(Incident(kind="memcg", oom_memcg="/kubepods.slice")).limit_scope == "node"
    node = annotate(Incident(kind="memcg", oom_memcg="/kubepods/burstable"))
    assert node.limit_scope == "qos"
    assert annotate(Incident(kind="memcg", oom_memcg="/mem_test")).limit_scope == "cgroup"
    # header suppressed: only the Killed process line, no memcg path -> scope unknown
    assert annotate(Incident(kind="memcg")).limit_scope is None


def test_annotate_group_kill_uses_group_cgroup_and_keeps_enriched_fields() -> None:
    group = f"/kubepods/burstable/pod28fcb1a0-a45c-44e7-b9bf-e3b9360bedba/{CID}"
    out = annotate(Incident(kind="memcg", group_cgroup=group, oom_memcg=group))
    assert out.container_id == CID and out.limit_scope == "container"
    kept = annotate(Incident(kind="memcg", task_memcg="/mem_test", pod_uid="from-api"))
    assert kept.pod_uid == "from-api"
