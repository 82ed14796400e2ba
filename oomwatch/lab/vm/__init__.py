"""The cgroup v2 lab VM: Debian's real kernels under QEMU, running this checkout's tests.

This project's machines keep the memory controller on cgroup v1, so everything oomwatch does
on v2 is proven in a VM: QEMU in pure emulation boots a Debian kernel (`KERNELS`: 6.1 and
6.12) with a busybox initramfs, shares the host's `/` read-only over 9p, mounts cgroup v2
with the memory controller and runs a command there with the host's Python.  One call is one
VM session (boot, run, power off); images are fetched and cached on first use
(`images.cache_dir()`, ~25 MB a kernel).

API:
    run_pytest_in_vm("6.12", [*GUEST_SUITE, "-q"]) -> PytestInVm  # rc, JUnit counts, console
    run_in_vm("6.1", ["python", "-c", "..."]) -> VmResult        # any command
    vm_unavailable_reason() -> str | None                       # QEMU missing, not x86_64
From the shell (what `tests/vm` does, one session per kernel):
    python -m oomwatch.lab.vm [--kernel 6.1] [--fixtures-to DIR] [-- PYTEST ARGS]
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from oomwatch.lab.vm.images import KERNELS, ImageError, boot_images, cache_dir
from oomwatch.lab.vm.session import GUEST_SHARE, VmResult, python_argv, run_in_vm
from oomwatch.lab.vm.session import vm_unavailable_reason as vm_unavailable_reason

# The guest suite: the real-kernel tests that need cgroup v2 (marked `cgroup_v2` by the fixture
# they take, tests/conftest.py): the v2 cases of the tests both versions run and the v2-only
# tests beside them, and the `any_kernel` tests (the kernel log, no memcg); not the
# `host_only` ones (each names its reason).  Add a path here and every VM session runs its
# v2 tests.
GUEST_SUITE: tuple[str, ...] = (
    "tests/kernel",
    "tests/lab",
    "tests/sources/test_kmsg_source.py",
    "tests/kube/test_kube_relay.py",
    "-m",
    "(cgroup_v2 or any_kernel) and not host_only",
)
REPO = Path(__file__).resolve().parents[3]
# Where the guest tests write the kernel's raw reports and counter files (`support.kernel_record`).
FIXTURES_ENV = "OOMWATCH_V2_FIXTURES"

__all__ = [
    "GUEST_SUITE",
    "KERNELS",
    "ImageError",
    "PytestInVm",
    "VmResult",
    "boot_images",
    "cache_dir",
    "run_in_vm",
    "run_pytest_in_vm",
    "vm_unavailable_reason",
]


@dataclass(frozen=True, slots=True)
class PytestInVm:
    """A pytest run in the VM: the session, and what its JUnit report says."""

    vm: VmResult
    tests: int = 0
    failures: list[str] = field(default_factory=list)  # "nodeid: message" of failed/errored
    skipped: list[str] = field(default_factory=list)  # "nodeid: reason"

    @property
    def passed(self) -> bool:
        return self.vm.returncode == 0 and not self.failures

    @property
    def fixtures(self) -> Path:
        return self.vm.share / "fixtures"

    def summary(self) -> str:
        head = (
            f"kernel {self.vm.release}: pytest rc {self.vm.returncode}, {self.tests} tests, "
            f"{len(self.failures)} failed, {len(self.skipped)} skipped in "
            f"{self.vm.wall_s:.0f} s (boot to power-off)"
        )
        if self.vm.timed_out:
            head += " -- the session TIMED OUT"
        return "\n".join([head, *self.failures, *(f"skipped {s}" for s in self.skipped)])


def run_pytest_in_vm(
    series: str,
    pytest_args: Sequence[str] = GUEST_SUITE,
    *,
    timeout_s: float = 900.0,
    echo: TextIO | None = None,
    env: Mapping[str, str] | None = None,
    share: Path | None = None,
    niceness: int = 0,
) -> PytestInVm:
    """Run pytest with `pytest_args` in this checkout inside a VM of the kernel series.

    The guest writes JUnit XML and, for the tests that record them (`support.kernel_record`), the
    kernel's reports and counter files (`fixtures/`) to the session share.
    """
    argv = python_argv(
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--basetemp=/tmp/pytest",
        f"--junitxml={GUEST_SHARE}/junit.xml",
        "-o",
        "junit_family=xunit2",
        "-rs",
        "--color=no",
        *pytest_args,
    )
    guest_env = {FIXTURES_ENV: f"{GUEST_SHARE}/fixtures", **(env or {})}
    vm = run_in_vm(
        series,
        argv,
        cwd=REPO,
        env=guest_env,
        timeout_s=timeout_s,
        echo=echo,
        share=share,
        niceness=niceness,
    )
    return read_junit(vm)


def read_junit(vm: VmResult) -> PytestInVm:
    path = vm.share / "junit.xml"
    if not path.is_file():
        return PytestInVm(vm, failures=["no JUnit report: pytest never finished in the guest"])
    tests = 0
    failures: list[str] = []
    skipped: list[str] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        tests += 1
        nodeid = f"{case.get('classname', '')}::{case.get('name', '')}"
        for child in case:
            message = (child.get("message") or "").strip()
            if child.tag in ("failure", "error"):
                failures.append(f"{nodeid}: {message[:500]}")
            elif child.tag == "skipped":
                skipped.append(f"{nodeid}: {message[:300]}")
    return PytestInVm(vm, tests, failures, skipped)


def copy_fixtures(run: PytestInVm, dest: Path) -> Path:
    """Copy what the guest recorded to `dest/<kernel release>/` (replacing an older copy)."""
    target = dest / run.vm.release
    shutil.rmtree(target, ignore_errors=True)
    if run.fixtures.is_dir():
        shutil.copytree(run.fixtures, target)
    return target
