"""The cgroup v2 real-kernel tests (`GUEST_SUITE`) in the lab VM: one session per Debian kernel.

This machine keeps the memory controller on cgroup v1, so every v2 claim of oomwatch is
proven here, on the kernels most v2 nodes run (6.1 and 6.12), by booting them under QEMU
(oomwatch.lab.vm).  A session boots, runs `GUEST_SUITE` with pytest, powers off; a failure
shows the guest's failing tests and the tail of its console.  It skips only where QEMU
cannot run at all; images are fetched with apt on first use and cached.
"""

from __future__ import annotations

import sys

import pytest
from support.vm_sessions import EarlySessions

from oomwatch.lab.vm import KERNELS, vm_unavailable_reason

pytestmark = [pytest.mark.vm, pytest.mark.slow]


@pytest.mark.parametrize("series", sorted(KERNELS))
def test_the_cgroup_v2_suite_passes_on_a_real_kernel(
    series: str, vm_sessions: EarlySessions
) -> None:
    reason = vm_unavailable_reason()
    if reason is not None:
        print(f"skipped: the lab VM cannot run here: {reason}", file=sys.stderr)
        pytest.skip(reason)
    run = vm_sessions.result(series)  # started when collection ended (conftest.py)
    print(run.summary())
    details = f"{run.summary()}\n--- guest console (tail) ---\n{run.vm.console_tail()}"
    assert run.passed, details
    assert run.tests > 0 and not run.skipped, details  # every v2 test ran in the guest
