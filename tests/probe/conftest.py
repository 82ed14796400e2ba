"""Fixtures for the probe tests (the records they write: support.probe_records)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def probe_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "probe"
    d.mkdir()
    yield d
