"""The `prepare-dirs` init container's own script, run as root with only the caps it is granted.

The script is taken from `daemonset/daemonset.yaml` as it ships; only its mount paths are
pointed at temporary directories.  `setpriv` drops every capability but the manifest's
`add:` list (and sets no_new_privs, as `allowPrivilegeEscalation: false` does), so a step
that needs a capability the manifest does not grant fails here as it would on a node.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.manifests import DAEMONSET_DIR, documents

REPO = DAEMONSET_DIR.parent
_STRING = re.compile(r'"([^"]*)"')


def _prepare_dirs() -> dict[str, Any]:
    (daemonset,) = [
        d for d in documents(DAEMONSET_DIR / "daemonset.yaml") if d["kind"] == "DaemonSet"
    ]
    (init,) = [
        c
        for c in daemonset["spec"]["template"]["spec"]["initContainers"]
        if c["name"] == "prepare-dirs"
    ]
    return init


def _localized(script: str, mounts: dict[str, Path]) -> str:
    """The script with every path string under a mount moved under that mount's temp dir."""

    def move(match: re.Match[str]) -> str:
        text = match.group(1)
        for mount_path, local in mounts.items():
            if text == mount_path or text.startswith(mount_path + "/"):
                return f'"{local}{text[len(mount_path) :]}"'
        return match.group(0)

    return _STRING.sub(move, script)


def _run_with_granted_caps(init: dict[str, Any], script: str) -> subprocess.CompletedProcess[str]:
    context = init["securityContext"]
    assert context["runAsUser"] == 0 and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    granted = ",".join(f"+{cap.lower()}" for cap in context["capabilities"].get("add", []))
    command = [
        "setpriv",
        "--inh-caps=-all",
        f"--bounding-set=-all{',' + granted if granted else ''}",
        "--no-new-privs",
        sys.executable,
        "-c",
        script,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)


def test_prepare_dirs_succeeds_with_only_the_granted_caps_and_again_on_restart(
    tmp_path: Path,
) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    if os.geteuid() != 0:
        pytest.skip("runs the init script as root, as the manifest does")
    init = _prepare_dirs()
    assert init["command"][:2] == ["python", "-c"]
    mounts: dict[str, Path] = {}
    for mount in init["volumeMounts"]:
        local = tmp_path / mount["name"]
        local.mkdir(mode=0o755)  # as the kubelet creates a DirectoryOrCreate hostPath
        mounts[mount["mountPath"]] = local
    script = _localized(init["command"][2], mounts)
    assert str(tmp_path) in script and "/var/lib/oomwatch" not in script

    for attempt in ("first start", "restart"):  # the second finds the dirs already prepared
        result = _run_with_granted_caps(init, script)
        assert result.returncode == 0, f"{attempt}: {result.stderr}"
        state = os.stat(mounts["/var/lib/oomwatch"])
        assert (state.st_uid, state.st_gid) == (65532, 65532), attempt
        assert stat.S_IMODE(state.st_mode) == 0o750, attempt
        probe = os.stat(mounts["/var/run/oomwatch/probe"])
        # sticky and setgid to the agent's group (a chown must not have dropped setgid)
        assert (probe.st_uid, probe.st_gid) == (0, 65532), attempt
        assert stat.S_IMODE(probe.st_mode) == 0o3777, attempt
        fifo = os.stat(mounts["/run/oomwatch"] / "kmsg.fifo")
        assert stat.S_ISFIFO(fifo.st_mode) and stat.S_IMODE(fifo.st_mode) == 0o666, attempt


def test_setpriv_really_withholds_the_other_caps(tmp_path: Path) -> None:
    """The harness is not vacuous: chmod of a dir root no longer owns needs CAP_FOWNER."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    if os.geteuid() != 0:
        pytest.skip("runs the init script as root, as the manifest does")
    target = tmp_path / "state"
    target.mkdir()
    naive = f'import os\nos.chown("{target}", 65532, 65532)\nos.chmod("{target}", 0o750)\n'
    result = _run_with_granted_caps(_prepare_dirs(), naive)
    assert result.returncode != 0 and "PermissionError" in result.stderr
