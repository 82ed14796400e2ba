"""pytest fixtures for real-kernel tests; import them into a conftest.py:

    from oomwatch.lab.fixtures import memcg_v1, scratch  # noqa: F401

`memcg_v1` skips the test (with the reason) where scratch memcgs cannot be made; `scratch`
gives a fresh `ScratchMemcg` (256 MiB root limit) that is removed after the test, pass or fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oomwatch.lab.memcg import ScratchMemcg, memcg_v1_unavailable_reason


@pytest.fixture(scope="session")
def memcg_v1() -> None:
    reason = memcg_v1_unavailable_reason()
    if reason is not None:
        pytest.skip(f"needs root, cgroup v1 memory and /dev/kmsg: {reason}")


@pytest.fixture
def scratch(memcg_v1: None) -> Iterator[ScratchMemcg]:
    with ScratchMemcg() as tree:
        yield tree
