"""The lab VM sessions start when collection ends and run beside the host tests.

When the run selects a VM test, its kernel's session starts in the background
(support.vm_sessions) and the test collects the finished result.  Set OOMWATCH_VM_EARLY=0 to
run each session inline, when its test comes.
"""

from __future__ import annotations

import os

import pytest
from support.vm_sessions import EarlySessions, selected_series

from oomwatch.lab.vm import vm_unavailable_reason

_EARLY = EarlySessions()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or os.environ.get("OOMWATCH_VM_EARLY", "1") == "0":
        return
    if vm_unavailable_reason() is not None:
        return
    series = selected_series(session.items)
    if series:
        _EARLY.start(series)


@pytest.fixture(scope="session")
def vm_sessions() -> EarlySessions:
    return _EARLY
