"""`pip install oomwatch` is the trainer probe and `oomwatch report`, nothing else: a wheel of
this tree installs into a fresh venv with no index at all (so it needs no other package), the
probe records a framework OOM there and `oomwatch report` reads a kernel log, and none of the
agent's libraries is imported, or importable.  `oomwatch run` there says which extra it needs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AGENT = ("kubernetes", "structlog", "psutil", "yaml")
CORPUS_LOG = next((REPO / "tests" / "data" / "corpus").glob("02-*.log"))

TRAINING_SCRIPT = """
import json, sys, oomwatch.probe
probe = oomwatch.probe.start()
probe.set_phase("train", epoch=0, step=7, batch_size=64)
probe.sample_now()
probe.stop()
agent = [m for m in sys.modules if m.split(".")[0] in AGENTS]
print(json.dumps({"file": str(probe.path), "agent_modules": agent}))
"""

pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only the wheel of this tree, installed with no index."""
    tmp = tmp_path_factory.mktemp("light")
    wheel_dir = tmp / "wheels"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheel_dir), str(REPO)]
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = wheel_dir.glob("oomwatch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.namelist()
    assert not [n for n in shipped if n.startswith("oomwatch/lab/vm/")], "the QEMU lab ships"
    assert "oomwatch/lab/hog.py" in shipped  # `oomwatch demo` needs the rest of the lab
    assert {f"oomwatch/enrichers/{m}.py" for m in ("pod", "forecast", "allocator")} <= set(shipped)
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    installed = _run([str(env_dir / "bin" / "pip"), "install", "--no-index", str(wheel)])
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    return env_dir


def test_nothing_but_oomwatch_is_installed(light: Path) -> None:
    listed = _run([str(light / "bin" / "pip"), "list", "--format=json"])
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert names <= {"oomwatch", "pip", "setuptools", "wheel"}, names


def test_the_probe_records_without_the_agents_libraries(light: Path, tmp_path: Path) -> None:
    script = f"AGENTS = {AGENT!r}\n" + TRAINING_SCRIPT
    run = _run(
        [str(light / "bin" / "python"), "-c", script],
        cwd=tmp_path,
        env={"OOMWATCH_PROBE_DIR": str(tmp_path / "probe"), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["agent_modules"] == []
    assert Path(out["file"]).stat().st_size > 0
    for name in AGENT:
        missing = _run([str(light / "bin" / "python"), "-c", f"import {name}"])
        assert missing.returncode != 0, f"{name} is importable in the light install"


def test_report_works_and_run_names_the_extra(light: Path) -> None:
    report = _run([str(light / "bin" / "oomwatch"), "report", str(CORPUS_LOG), "--json"])
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    assert doc["schema_version"] == 2 and doc["incidents"][0]["verdict"]
    agent = _run([str(light / "bin" / "oomwatch"), "run", "--standalone"])
    assert agent.returncode == 2
    assert "pip install 'oomwatch[agent]'" in agent.stderr and "Traceback" not in agent.stderr


def test_the_installed_enrichers_package_lists_its_modules(light: Path) -> None:
    """The agent finds its enrichers by listing the package (`oomwatch.enrichers.discover`):
    the installed wheel lists the same modules (listed, not imported: this install has no
    agent libraries)."""
    listing = (
        "import importlib.util, pkgutil;"
        "spec = importlib.util.find_spec('oomwatch.enrichers');"
        "print(*(m.name for m in pkgutil.iter_modules(spec.submodule_search_locations)))"
    )
    listed = _run([str(light / "bin" / "python"), "-c", listing])
    assert listed.returncode == 0, listed.stderr
    assert {"pod", "forecast", "allocator"} <= set(listed.stdout.split())
