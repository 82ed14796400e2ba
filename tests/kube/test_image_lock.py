"""The image installs exactly the locked Python packages (dependencies by hash)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$")


def locked(path: Path) -> dict[str, list[str]]:
    """Package -> its sha256 hashes, from a pip-compile --generate-hashes file."""
    pins: dict[str, list[str]] = {}
    current = None
    for line in path.read_text().splitlines():
        if m := PIN.match(line):
            current = m.group(1).lower().replace("_", "-")
            pins[current] = []
        elif current and line.strip().startswith("--hash=sha256:"):
            pins[current].append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
        elif not line.startswith(" "):
            current = None
    return pins


def test_every_dependency_is_pinned_with_hashes() -> None:
    runtime = locked(REPO / "requirements.lock")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # The image runs the agent: its extra's libraries, and the (empty) core ones.
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["agent"]]:
        name = re.split(r"[<>=!~ \[]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in runtime, f"{name} is not in requirements.lock"
    assert all(len(h) == 64 for hashes in runtime.values() for h in hashes)
    assert all(runtime.values()), [n for n, h in runtime.items() if not h]
    build = locked(REPO / "requirements-build.lock")
    assert "setuptools" in build and all(build.values())


def test_the_dockerfile_installs_only_from_the_locks() -> None:
    pip = re.compile(r"\bpip\b.*\b(install|wheel)\b")
    steps = [
        line.rstrip(" \\")
        for line in (REPO / "Dockerfile").read_text().splitlines()
        if pip.search(line) and not line.startswith("#")
    ]
    assert steps and all("--no-deps" in step for step in steps)
    assert all("--require-hashes" in step for step in steps if " -r " in step)
    assert {m for s in steps for m in re.findall(r"-r (\S+)", s)} == {
        "requirements.lock",
        "requirements-build.lock",
    }
    # an index only where the locks are read (./dev.sh image then passes a wheelhouse)
    assert all("$offline" in s or "--no-index" in s for s in steps)
    assert any("--no-build-isolation" in s and s.endswith(" .") for s in steps)


@pytest.mark.slow
def test_the_locked_files_match_their_hashes(tmp_path: Path) -> None:
    """What `pip install --require-hashes` in the image checks, here: download and verify."""
    env = {**os.environ, "PIP_CONSTRAINT": ""}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--require-hashes",
            "--no-deps",
            "-r",
            "requirements.lock",
            "-r",
            "requirements-build.lock",
            "-d",
            str(tmp_path),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(list(tmp_path.iterdir())) == len(locked(REPO / "requirements.lock")) + len(
        locked(REPO / "requirements-build.lock")
    )
