"""support.vm_sessions: the VM sessions started ahead of their tests, one at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import support.vm_sessions as vm_sessions
from support.vm_sessions import BACKGROUND_NICENESS, EarlySessions


def test_started_sessions_run_in_order_at_low_priority_and_hand_back_their_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, int]] = []

    def run(series: str, args: Sequence[str], *, niceness: int = 0, **_: float) -> Any:
        calls.append((series, niceness))
        if series == "broken":
            raise RuntimeError("no kernel image")
        return f"result of {series}"

    monkeypatch.setattr(vm_sessions, "run_pytest_in_vm", run)
    early = EarlySessions()
    early.start(["6.1", "broken", "6.12"])
    results: dict[str, object] = {s: early.result(s) for s in ("6.12", "6.1")}
    assert results == {"6.12": "result of 6.12", "6.1": "result of 6.1"}
    with pytest.raises(RuntimeError, match="no kernel image"):
        early.result("broken")  # the failure reaches the test that collects it
    assert calls == [(s, BACKGROUND_NICENESS) for s in ("6.1", "broken", "6.12")]
    # a series nobody started runs when its test asks, at normal priority
    late: object = early.result("6.6")
    assert late == "result of 6.6"
    assert calls[-1] == ("6.6", 0)
