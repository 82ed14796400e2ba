"""The lab VM's pieces that need no VM: module order, the guest script, QEMU's command line,
reading the guest's JUnit report, the guest suite's paths."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from oomwatch.lab.vm import GUEST_SUITE, REPO, PytestInVm, VmResult, read_junit
from oomwatch.lab.vm.images import BootImages, ImageError, load_order, module_depends
from oomwatch.lab.vm.session import qemu_argv, run_script


def ko(depends: str) -> bytes:
    """A module's .modinfo strings as the kernel build writes them (NUL-separated)."""
    return b"\0license=GPL\0depends=" + depends.encode() + b"\0retpoline=Y\0name=x\0"


def test_modinfo_depends_is_read_and_dashes_become_underscores() -> None:
    assert module_depends(ko("virtio,virtio_ring")) == ["virtio", "virtio_ring"]
    assert module_depends(ko("")) == []
    assert module_depends(ko("virtio-ring")) == ["virtio_ring"]
    assert module_depends(b"no modinfo here") == []


def test_load_order_puts_dependencies_first_and_skips_built_in_ones() -> None:
    # 6.1: everything is a module
    available = {
        "virtio_ring": ko(""),
        "virtio": ko("virtio_ring"),
        "virtio_pci_modern_dev": ko(""),
        "virtio_pci_legacy_dev": ko(""),
        "virtio_pci": ko("virtio_ring,virtio_pci_modern_dev,virtio_pci_legacy_dev,virtio"),
        "netfs": ko(""),
        "fscache": ko("netfs"),
        "9pnet": ko(""),
        "9pnet_virtio": ko("virtio,9pnet,virtio_ring"),
        "9p": ko("9pnet,fscache,netfs"),
    }
    order = load_order(available, builtin=set())
    for name, data in available.items():
        assert all(order.index(dep) < order.index(name) for dep in module_depends(data))
    assert order[-1] == "9p" and len(order) == len(available)
    # 6.12: virtio built in, fscache folded into netfs
    builtin = {
        "virtio",
        "virtio_ring",
        "virtio_pci",
        "virtio_pci_modern_dev",
        "virtio_pci_legacy_dev",
    }
    small = {
        "netfs": ko(""),
        "9pnet": ko("netfs"),
        "9pnet_virtio": ko("9pnet"),
        "9p": ko("netfs,9pnet"),
    }
    assert load_order(small, builtin) == ["netfs", "9pnet", "9pnet_virtio", "9p"]


def test_a_missing_module_is_a_clear_error() -> None:
    with pytest.raises(ImageError, match="9pnet is neither in the package nor built in"):
        load_order({"9p": ko("9pnet"), "9pnet_virtio": ko("")}, builtin={"virtio_pci"})


def test_qemu_runs_emulated_with_the_host_root_read_only_and_a_writable_share(
    tmp_path: Path,
) -> None:
    images = BootImages("6.1", "pkg", "6.1.0-1-amd64", tmp_path / "vmlinuz", tmp_path / "i.gz")
    argv = qemu_argv(images, tmp_path / "share", memory_mb=2048, cpus=2)
    assert argv[argv.index("-accel") + 1] == "tcg" and "-enable-kvm" not in argv
    assert argv[argv.index("-smp") + 1] == "2"
    shares = [argv[i + 1] for i, a in enumerate(argv) if a == "-virtfs"]
    assert any("path=/," in s and "readonly=on" in s and "mount_tag=host" in s for s in shares)
    assert any(f"path={tmp_path / 'share'}," in s and "readonly" not in s for s in shares)


def test_the_guest_script_quotes_everything() -> None:
    script = run_script(
        ["python", "-c", "print('a b')", "$HOME"], Path("/work/it's here"), {"X": "a b;c"}
    )
    lines = script.splitlines()
    assert "export X='a b;c'" in lines
    assert f"cd {shlex.quote('/work/it' + chr(39) + 's here')} || exit 125" in lines
    assert "python -c 'print('\"'\"'a b'\"'\"')' '$HOME'" in lines
    assert lines[-1] == 'exit "$rc"'  # its status, after the guest's global OOM kills if it failed


def _vm(share: Path, returncode: int | None = 0) -> VmResult:
    return VmResult("6.12", "6.12.1", returncode, False, 1.0, share)


def test_junit_report_gives_failures_and_skips(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.v2.test_kills" name="test_a"/>'
        '<testcase classname="tests.v2.test_kills" name="test_b">'
        '<failure message="assert 1 == 2">trace</failure></testcase>'
        '<testcase classname="tests.v2.test_lab" name="test_c">'
        '<skipped message="needs unshare"/></testcase>'
        "</testsuite></testsuites>"
    )
    run = read_junit(_vm(tmp_path, returncode=1))
    assert run.tests == 3 and not run.passed
    assert run.failures == ["tests.v2.test_kills::test_b: assert 1 == 2"]
    assert run.skipped == ["tests.v2.test_lab::test_c: needs unshare"]
    assert "1 failed, 1 skipped" in run.summary()


def test_no_junit_report_is_a_failure_that_says_so(tmp_path: Path) -> None:
    run = read_junit(_vm(tmp_path, returncode=None))
    assert isinstance(run, PytestInVm) and not run.passed
    assert run.failures == ["no JUnit report: pytest never finished in the guest"]


def test_every_path_of_the_guest_suite_exists() -> None:
    """A path the guest cannot find fails its whole session (pytest collects nothing)."""
    paths = [arg for arg in GUEST_SUITE if arg.startswith("tests/")]
    assert paths and [p for p in paths if not (REPO / p).exists()] == []
