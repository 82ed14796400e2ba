"""The trainer lives in `examples/`, outside the installed package: import it from the repo."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

torch = pytest.importorskip("torch", reason="the trainer needs torch (pip install .[trainer])")
pytest.importorskip("sklearn", reason="the digits dataset ships with scikit-learn")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    """The digits MLP is fastest on one thread, and results must not depend on the count."""
    torch.set_num_threads(1)
