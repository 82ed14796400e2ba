"""Fixtures every test folder shares (pytest finds them here; nothing imports this file).

Real-kernel: `memcg_v1` / `memcg_v2` skip the test (with the reason) where scratch memcgs of
that cgroup version cannot be made; `scratch` / `scratch_v2` give a fresh `ScratchMemcg`
(256 MiB root limit) on that version that is removed after the test, pass or fail;
`cgroup_version` is each version in turn, for a test that holds on both, and `kernel_tree` a
scratch tree on it.  Every test that needs a version is marked `cgroup_v1` / `cgroup_v2`.
The memory controller sits on one version per host: this project's machines have v1, so the
v2 cases run in the lab VM (`python -m oomwatch.lab.vm`, `GUEST_SUITE`), and on a v2 host
directly.  A test marked `host_only(reason)` runs on either version's host but the lab VM's
suite leaves it out (its [v2] case here skips with the reason); one marked `any_kernel` needs
no memcg, only the running kernel, and runs on the host and on each lab VM kernel.
`start_daemon` runs `oomwatch run` over this machine's cgroups.  `fake_v2` is a written v2
tree with a pod of two containers (`support.cgroupfs.kubelet_v2_tree`).  Helpers that are not
fixtures live in `support` (tests/ is on pytest's path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.agent import DaemonProcess
from support.cgroupfs import CgroupV2Tree, kubelet_v2_tree
from support.kernel_tree import KernelTree
from support.prometheus import tool

from oomwatch.lab.hierarchy import Version, memcg_v2_unavailable_reason
from oomwatch.lab.memcg import ScratchMemcg, memcg_v1_unavailable_reason
from oomwatch.lab.vm import GUEST_SUITE

# The files and folders the lab VM's pytest collects (the rest of GUEST_SUITE is options).
GUEST_PATHS = tuple(arg for arg in GUEST_SUITE if arg.startswith("tests/"))


@pytest.fixture(scope="session")
def memcg_v1() -> None:
    reason = memcg_v1_unavailable_reason()
    if reason is not None:
        pytest.skip(f"needs root, cgroup v1 memory and /dev/kmsg: {reason}")


@pytest.fixture
def scratch(memcg_v1: None) -> Iterator[ScratchMemcg]:
    with ScratchMemcg(version=1) as tree:
        yield tree


@pytest.fixture(scope="session")
def memcg_v2() -> None:
    reason = memcg_v2_unavailable_reason()
    if reason is not None:
        pytest.skip(
            f"needs root, cgroup v2 memory and /dev/kmsg ({reason}); "
            "tests/vm runs these in the lab VM on Debian's 6.1 and 6.12 kernels"
        )


@pytest.fixture
def scratch_v2(memcg_v2: None) -> Iterator[ScratchMemcg]:
    with ScratchMemcg(version=2) as tree:
        yield tree


@pytest.fixture(
    params=[
        pytest.param(1, id="v1", marks=pytest.mark.cgroup_v1),
        pytest.param(2, id="v2", marks=pytest.mark.cgroup_v2),
    ]
)
def cgroup_version(request: pytest.FixtureRequest) -> Version:
    """Each cgroup version in turn, skipped where scratch memcgs of it cannot be made."""
    version: Version = request.param
    left_out = request.node.get_closest_marker("host_only")
    if version == 2 and left_out is not None:
        reason = memcg_v2_unavailable_reason()
        if reason is not None:  # say why the lab VM will not run it either
            pytest.skip(
                f"needs root, cgroup v2 memory and /dev/kmsg ({reason}); "
                f"the lab VM's suite leaves it out: {left_out.args[0]}"
            )
    request.getfixturevalue("memcg_v1" if version == 1 else "memcg_v2")
    return version


@pytest.fixture
def kernel_tree(cgroup_version: Version) -> Iterator[KernelTree]:
    with ScratchMemcg(version=cgroup_version) as tree:
        yield KernelTree(tree)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that need one cgroup version by the fixture that skips them elsewhere;
    refuse a v2 case the lab VM would never run without a reason (`host_only`)."""
    left_out: list[str] = []
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "memcg_v1" in names:
            item.add_marker(pytest.mark.cgroup_v1)
        if "memcg_v2" in names:
            item.add_marker(pytest.mark.cgroup_v2)
        if _outside_the_guest_suite(item, config.rootpath):
            left_out.append(item.nodeid)
    if left_out:
        raise pytest.UsageError(
            "real-kernel tests the lab VM never runs (add the file to "
            "oomwatch.lab.vm.GUEST_SUITE, or mark it host_only(reason)): " + ", ".join(left_out)
        )


def _outside_the_guest_suite(item: pytest.Item, root: Path) -> bool:
    if item.get_closest_marker("host_only") is not None:
        return False
    if (
        item.get_closest_marker("cgroup_v2") is None
        and item.get_closest_marker("any_kernel") is None
    ):
        return False
    path = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
    return not any(path == p or path.startswith(p + "/") for p in GUEST_PATHS)


@pytest.fixture
def fake_v2(tmp_path: Path) -> CgroupV2Tree:
    return kubelet_v2_tree(tmp_path)


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """Start `oomwatch run` processes on one temp state dir; all are stopped afterwards."""
    started: list[DaemonProcess] = []

    def start(*extra: str) -> DaemonProcess:
        daemon = DaemonProcess(tmp_path / "state", *extra)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()


@pytest.fixture(scope="session")
def promtool() -> str:
    return tool("promtool")


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    return tool("prometheus")
