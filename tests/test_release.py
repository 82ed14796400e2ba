"""Release hygiene: one version, written once in oomwatch/__init__.py, and every
other place that states it agrees; the license file is the license the package declares."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from oomwatch import __version__

REPO = Path(__file__).resolve().parents[1]
# Image references with a version tag: `oomwatch:X.Y.Z`, `oomwatch-trainer:X.Y.Z[-cuda]`.
IMAGE_TAG = re.compile(r"\boomwatch(?:-trainer)?:(\d+\.\d+\.\d+)\b")


def test_the_package_reads_its_version_from_the_module() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "oomwatch.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_the_chart_and_the_kustomize_image_tag_are_the_package_version() -> None:
    chart = yaml.safe_load((REPO / "charts" / "oomwatch" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__
    kustomization = yaml.safe_load((REPO / "daemonset" / "kustomization.yaml").read_text())
    (image,) = [i for i in kustomization["images"] if i["name"] == "oomwatch"]
    assert image["newTag"] == __version__


def test_documented_image_tags_are_the_package_version() -> None:
    paths = [
        REPO / "Dockerfile",
        REPO / "README.md",
        REPO / "daemonset" / "README.md",
        REPO / "charts" / "oomwatch" / "README.md",
        REPO / "daemonset" / "kustomization.yaml",
        *sorted((REPO / "examples").rglob("*.yaml")),
        *sorted((REPO / "examples").rglob("Dockerfile")),
    ]
    stated = {
        (str(p.relative_to(REPO)), tag) for p in paths for tag in IMAGE_TAG.findall(p.read_text())
    }
    assert stated, "no image tag found: the pattern no longer matches the docs"
    assert {tag for _, tag in stated} == {__version__}, sorted(stated)


def test_the_license_file_is_the_declared_license() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_has_an_unreleased_section() -> None:
    headings = re.findall(r"^## (.+)$", (REPO / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    assert headings and headings[0] == "Unreleased"


def test_the_changelog_has_a_section_for_this_version() -> None:
    """`./dev.sh release` refuses a version the changelog does not describe."""
    headings = re.findall(r"^## (.+)$", (REPO / "CHANGELOG.md").read_text(), flags=re.MULTILINE)
    assert __version__ in headings


def test_the_krew_manifest_points_at_this_versions_release() -> None:
    """Its sha256 is set by `./dev.sh release` in dist/oomwatch-krew.yaml, not here."""
    plugin = yaml.safe_load((REPO / "plugins" / "oomwatch.yaml").read_text())
    assert plugin["spec"]["version"] == f"v{__version__}"
    (platform,) = plugin["spec"]["platforms"]
    assert f"/download/v{__version__}/kubectl-oomwatch.tar.gz" in platform["uri"]
