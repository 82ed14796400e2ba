"""Files the agent and the probe create (issue 22): the store is the agent's alone; a ring
file is built under a name no other pod can predict, never through a planted file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from oomwatch.probe.ring import RingWriter
from oomwatch.store import IncidentStore


def test_the_store_is_not_world_readable(tmp_path: Path) -> None:
    state = tmp_path / "state"
    IncidentStore(state).close()
    for path in state.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


def test_an_existing_world_readable_store_is_narrowed(tmp_path: Path) -> None:
    IncidentStore(tmp_path).close()
    db = tmp_path / "oomwatch.db"
    db.chmod(0o644)
    IncidentStore(tmp_path).close()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_a_planted_temporary_name_is_not_written_through(tmp_path: Path) -> None:
    target = tmp_path / "victim-file"
    target.write_text("untouched")
    ring = tmp_path / "trainer.ring"
    (tmp_path / ".trainer.ring.tmp").symlink_to(target)  # the old, predictable name
    RingWriter(str(ring), {"pid": 1, "comm": "python3"}).close()
    assert target.read_text() == "untouched"
    assert ring.is_file() and not ring.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [".trainer.ring.tmp"]
    assert os.stat(ring).st_nlink == 1
