"""The lab VM sessions a test run starts ahead of their tests (tests/vm/conftest.py).

A session is minutes of QEMU emulation that shares nothing with the host tests but the
checkout, so the suite need not wait for it at its end: the sessions run one at a time in the
background, QEMU at a lower CPU priority so the host tests' timing is not starved.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future

import pytest

from oomwatch.lab.vm import GUEST_SUITE, PytestInVm, run_pytest_in_vm

__all__ = ["BACKGROUND_NICENESS", "EarlySessions", "selected_series"]

# QEMU's nice value in the background: the host tests keep the CPU when they need it.
BACKGROUND_NICENESS = 10
# A session alone takes 3-4 minutes; in the background it gets what the host tests leave.
BACKGROUND_TIMEOUT_S = 1800.0


class EarlySessions:
    """The VM sessions this run started ahead of their tests, by kernel series."""

    def __init__(self) -> None:
        self._runs: dict[str, Future[PytestInVm]] = {}

    def start(self, series: Sequence[str]) -> None:
        for one in series:
            self._runs.setdefault(one, Future())
        worker = threading.Thread(
            target=self._run_each, args=(list(series),), name="vm-sessions", daemon=True
        )
        worker.start()

    def _run_each(self, series: list[str]) -> None:
        for one in series:
            run = self._runs[one]
            try:
                result = run_pytest_in_vm(
                    one,
                    [*GUEST_SUITE, "-q"],
                    niceness=BACKGROUND_NICENESS,
                    timeout_s=BACKGROUND_TIMEOUT_S,
                )
                run.set_result(result)
            except BaseException as exc:  # the test that collects it reports it
                run.set_exception(exc)

    def result(self, series: str) -> PytestInVm:
        """The session's result: the early one when it was started, else one run now."""
        run = self._runs.get(series)
        if run is None:
            return run_pytest_in_vm(series, [*GUEST_SUITE, "-q"])
        return run.result()


def selected_series(items: Sequence[pytest.Item]) -> list[str]:
    """The kernel series of the selected VM tests (their `series` parameter)."""
    found: set[str] = set()
    for item in items:
        callspec = getattr(item, "callspec", None)
        marked = item.get_closest_marker("vm") is not None
        if marked and callspec is not None and "series" in callspec.params:
            found.add(str(callspec.params["series"]))
    return sorted(found)
