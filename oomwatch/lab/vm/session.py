"""One VM session: boot a kernel under QEMU, run one command inside, bring back its results.

QEMU runs in pure emulation (`-accel tcg -cpu max`): with KVM the guests hang on these
machines.  The host's `/` is shared read-only, so the guest runs the host's interpreter and
this checkout; a fresh host directory is shared writable at `/run/oomwatch-vm` and carries
`run.sh` in and the exit status (`rc`) and whatever the command writes there back out.  The
serial console (the command's stdout and stderr) goes to `console.log` there.  QEMU is
killed when the session ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from oomwatch.lab.vm.images import BootImages, boot_images

QEMU = "qemu-system-x86_64"
GUEST_SHARE = "/run/oomwatch-vm"  # where the session's writable share sits in the guest
# A TCG guest takes a host core per vCPU: on a shared machine one VM at a time, machine-wide.
VM_LOCK_PATH = Path("/run/lock/oomwatch-vm.lock")
DEFAULT_MEMORY_MB = 2048
DEFAULT_CPUS = 2
_GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True, slots=True)
class VmResult:
    """What a session brought back.  `returncode` is None when the guest never reported one
    (it crashed, or the session timed out: `timed_out`)."""

    series: str
    release: str
    returncode: int | None
    timed_out: bool
    wall_s: float
    share: Path  # the host side of /run/oomwatch-vm: console.log, rc, the command's files

    @property
    def console(self) -> str:
        path = self.share / "console.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def console_tail(self, chars: int = 6000) -> str:
        return self.console[-chars:]


def vm_unavailable_reason() -> str | None:
    """Why no lab VM can run here, or None when one can (images may still need fetching)."""
    if platform.machine() != "x86_64":
        return f"the lab VM boots amd64 kernels; this host is {platform.machine()}"
    if shutil.which(QEMU) is None:
        return f"{QEMU} not found (apt-get install qemu-system-x86 busybox-static cpio)"
    return None


def qemu_argv(images: BootImages, share: Path, *, memory_mb: int, cpus: int) -> list[str]:
    """The QEMU command line of a session (the guest's console on QEMU's stdout)."""
    fs = "local,security_model=none,multidevs=remap"
    return [
        QEMU,
        "-accel",
        "tcg",
        "-cpu",
        "max",
        "-m",
        str(memory_mb),
        "-smp",
        str(cpus),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-serial",
        "stdio",
        "-no-reboot",
        "-kernel",
        str(images.vmlinuz),
        "-initrd",
        str(images.initrd),
        # loglevel=1: OOM reports go to /dev/kmsg only, not the (slow, emulated) serial line
        "-append",
        "console=ttyS0 panic=-1 quiet loglevel=1",
        "-virtfs",
        f"{fs},path=/,mount_tag=host,readonly=on",
        "-virtfs",
        f"{fs},path={share},mount_tag=out",
    ]


def run_script(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> str:
    """The guest's run.sh: a plain environment, the working directory, the command."""
    lines = ["# written by oomwatch.lab.vm: run inside the guest, chrooted into the host's /"]
    base = {
        "PATH": _GUEST_PATH,
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OOMWATCH_VM_SHARE": GUEST_SHARE,
    }
    lines += [f"export {key}={shlex.quote(value)}" for key, value in {**base, **env}.items()]
    lines += [f"cd {shlex.quote(str(cwd))} || exit 125", shlex.join(argv), "rc=$?"]
    lines += _AFTER_A_FAILURE
    return "\n".join(lines) + "\n"


# When the command failed: the guest kernel's kills outside a memcg's limit (a global OOM, the
# guest's memory all used: it may have killed an agent under test, which then looks like a
# crash), on the console, where the host's failure message shows its tail.
_AFTER_A_FAILURE = [
    'if [ "$rc" -ne 0 ]; then',
    "    echo '--- guest kernel: OOM kills at no memcg limit (global) ---'",
    "    dmesg | grep 'Out of memory: Killed process' | grep -v 'Memory cgroup' | tail -20",
    "    dmesg | grep -c 'Memory cgroup out of memory: Killed process' | sed 's/^/memcg kills: /'",
    "fi",
    'exit "$rc"',
]


def kept_under_tmp(cwd: Path, argv: Sequence[str]) -> list[str]:
    """Host directories under /tmp the session needs (its working directory, the
    interpreter's environment): the guest's /tmp is its own tmpfs, which would hide them."""
    wanted = [cwd.resolve()]
    if argv and argv[0].startswith("/"):
        wanted.append(Path(argv[0]).parent.parent)  # <venv>/bin/python -> <venv>
    out: list[str] = []
    for path in wanted:
        text = str(path)
        if text.startswith("/tmp/") and not any(text.startswith(k + "/") for k in out):
            out.append(text)
    return sorted(set(out))


@contextlib.contextmanager
def _vm_lock(echo: TextIO | None) -> Iterator[None]:
    VM_LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(VM_LOCK_PATH, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if echo is not None:
                print("oomwatch-vm: another lab VM is running here; waiting", file=echo)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def run_in_vm(
    series: str,
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 900.0,
    share: Path | None = None,
    echo: TextIO | None = None,
    memory_mb: int = DEFAULT_MEMORY_MB,
    cpus: int = DEFAULT_CPUS,
    niceness: int = 0,
) -> VmResult:
    """Boot the kernel series (e.g. "6.1"), run `argv` in `cwd` (default: here) as root
    inside it, and return when the guest powers off or `timeout_s` passes.

    `share` (default: a new temporary directory, kept) is the host side of the guest's
    `/run/oomwatch-vm`; the command finds it in `$OOMWATCH_VM_SHARE`.  The console is copied
    to `echo` as it comes (e.g. sys.stderr) and always to `share/console.log`.  A positive
    `niceness` lowers QEMU's CPU priority, for a session that runs beside other work.
    """
    images = boot_images(series)
    share = share or Path(tempfile.mkdtemp(prefix=f"oomwatch-vm-{series}-"))
    share.mkdir(parents=True, exist_ok=True)
    for stale in ("rc", "console.log"):
        (share / stale).unlink(missing_ok=True)
    workdir = cwd or Path.cwd()
    (share / "run.sh").write_text(run_script(argv, workdir, env or {}))
    (share / "keep").write_text("".join(f"{d}\n" for d in kept_under_tmp(workdir, argv)))
    with _vm_lock(echo):
        started = time.monotonic()
        timed_out = _boot(
            qemu_argv(images, share, memory_mb=memory_mb, cpus=cpus),
            share / "console.log",
            timeout_s,
            echo,
            niceness,
        )
        wall_s = time.monotonic() - started
    rc_file = share / "rc"
    returncode = int(rc_file.read_text()) if rc_file.is_file() else None
    return VmResult(series, images.release, returncode, timed_out, wall_s, share)


def _boot(
    argv: list[str], console: Path, timeout_s: float, echo: TextIO | None, niceness: int
) -> bool:
    """Run QEMU until the guest powers off; True when it had to be killed at the timeout."""
    with open(console, "w") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: _die_with_parent(niceness),
        )
        copier = threading.Thread(target=_copy_console, args=(proc, log, echo), daemon=True)
        copier.start()
        try:
            proc.wait(timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            print(f"oomwatch-vm: no power-off within {timeout_s:.0f} s; killing QEMU", file=log)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            copier.join(10)
    return timed_out


def _die_with_parent(niceness: int) -> None:
    """QEMU gets SIGKILL when the test run that started it dies (PR_SET_PDEATHSIG; the
    "parent" is the thread that started it, which waits for it): a killed pytest must not
    leave a CPU-heavy guest running on a shared machine."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)
    if niceness > 0:
        os.nice(niceness)


def _copy_console(proc: subprocess.Popen[bytes], log: TextIO, echo: TextIO | None) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode(errors="replace").replace("\r", "")
        log.write(line)
        log.flush()
        if echo is not None:
            echo.write(line)
            echo.flush()


def python_argv(*args: str) -> list[str]:
    """This interpreter (the project's venv), as the guest runs it."""
    return [sys.executable, *args]
