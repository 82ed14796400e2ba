"""The trainer lives in `examples/`, outside the installed package (the repository root is on
pytest's path for it)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the trainer needs torch (pip install .[trainer])")
pytest.importorskip("sklearn", reason="the digits dataset ships with scikit-learn")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    """The digits MLP is fastest on one thread, and results must not depend on the count."""
    torch.set_num_threads(1)
