"""The probe-pod-dirs component's ValidatingAdmissionPolicy, evaluated as the API server would:
a pod may mount the node's probe directory only as its own per-pod directory, so
that directory is evidence of the pod a probe file speaks for (--probe-pod-dirs).

Evaluated with cel-python (support.admission).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from support.admission import CLAIM, COMPONENT, HOST, OWN, UID_ENV, admitted, trainer
from support.manifests import DAEMONSET_DIR


@pytest.mark.parametrize("volume", [HOST, CLAIM])
def test_the_pods_own_directory_is_admitted(volume: dict[str, Any]) -> None:
    assert admitted(trainer(volume, OWN))


@pytest.mark.parametrize(
    ("volume", "mount", "env"),
    [
        (HOST, {}, None),  # the whole directory: every pod's files
        (CLAIM, {}, None),
        (HOST, {"subPath": "0b7a1c9e-another-pods-uid"}, None),  # another pod's directory
        (HOST, {"subPathExpr": "$(VICTIM)"}, [{"name": "VICTIM", "value": "0b7a1c9e"}]),
        (HOST, OWN, [UID_ENV, {"name": "POD_UID", "value": "0b7a1c9e"}]),  # overridden
        (HOST, {"subPathExpr": "$(POD_UID)/.."}, None),
        (HOST, {"subPathExpr": "$(POD_UID)", "subPath": "x"}, None),
        (HOST, OWN, []),  # POD_UID unset
        ({"hostPath": {"path": "/run/oomwatch/probe"}}, {}, None),  # /var/run is /run
        ({"hostPath": {"path": "/var/run/oomwatch/probe/"}}, {}, None),
    ],
)
def test_any_other_mount_of_the_probe_directory_is_denied(
    volume: dict[str, Any], mount: dict[str, Any], env: list[dict[str, Any]] | None
) -> None:
    assert not admitted(trainer(volume, mount, env))


@pytest.mark.parametrize("path", ["/", "/var/run", "/run/oomwatch", "/var/run/oomwatch/probe/x"])
def test_a_hostpath_above_or_inside_the_directory_is_denied(path: str) -> None:
    assert not admitted(trainer({"hostPath": {"path": path}}, OWN))


@pytest.mark.parametrize("where", ["initContainers", "ephemeralContainers"])
def test_init_and_ephemeral_containers_are_held_to_the_same_rule(where: str) -> None:
    assert admitted(trainer(HOST, OWN, where=where))
    assert not admitted(trainer(HOST, {}, where=where))


def test_pods_without_the_probe_volume_and_the_agents_namespace_are_untouched() -> None:
    plain = trainer({"emptyDir": {}}, {})
    assert admitted(plain)
    assert admitted(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }
    )
    assert admitted(trainer(HOST, {}), namespace="oomwatch")


def test_the_shipped_training_jobs_are_admitted() -> None:
    for name in ("pytorch-job.yaml", "tensorflow-job.yaml"):
        path = DAEMONSET_DIR.parent / "examples" / "training" / name
        (job,) = [d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "Job"]
        pod = copy.deepcopy(job["spec"]["template"])
        pod.update(apiVersion="v1", kind="Pod")
        assert admitted(pod), name


def test_the_component_turns_the_flag_on() -> None:
    component = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    (patch,) = component["patches"]
    (op,) = yaml.safe_load(patch["patch"])
    assert op["value"] == "--probe-pod-dirs"
