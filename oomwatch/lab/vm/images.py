"""Boot images for the cgroup v2 lab VM: Debian's kernels and a busybox initramfs, cached.

A kernel comes from Debian's own package (`apt-get download`, never installed on the host):
the metapackage of a series (`linux-image-amd64` for 6.1, `linux-image-6.12-amd64` for 6.12,
both in bookworm and bookworm-security) names the newest image package; from it we keep
`vmlinuz` and the few modules that mount the host's `/` over 9p (the generic flavour builds
them as modules; some are built in, which `modules.builtin` says).  The initramfs holds
busybox-static, those modules in load order and `init.sh`.  Everything lands under
`cache_dir()` (`$OOMWATCH_VM_CACHE`, else `$XDG_CACHE_HOME/oomwatch-vm`, else
`~/.cache/oomwatch-vm`), keyed by package and by what went into the initramfs, so a second
run downloads and builds nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# What the guest needs to mount the host's root over virtio 9p; dependencies come from the
# modules' own `depends=` (modinfo), so a kernel that built some of them in just loads fewer.
ROOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p")
_MODULE_DIRS = (
    "kernel/drivers/virtio/",
    "kernel/net/9p/",
    "kernel/fs/9p/",
    "kernel/fs/netfs/",
    "kernel/fs/fscache/",
)
BUSYBOX = Path("/bin/busybox")
INIT_SCRIPT = Path(__file__).with_name("init.sh")
_DEPENDS = re.compile(rb"(?:^|\0)depends=([^\0]*)\0")


@dataclass(frozen=True, slots=True)
class KernelSeries:
    """A Debian kernel series the lab boots, and the metapackage that names its newest build."""

    name: str  # "6.1"
    metapackage: str


KERNELS: dict[str, KernelSeries] = {
    "6.1": KernelSeries("6.1", "linux-image-amd64"),
    "6.12": KernelSeries("6.12", "linux-image-6.12-amd64"),
}


@dataclass(frozen=True, slots=True)
class BootImages:
    """A kernel ready to boot: its image, its initramfs and its release (`uname -r`)."""

    series: str
    package: str  # e.g. linux-image-6.1.0-56-amd64_6.1.192-2
    release: str
    vmlinuz: Path
    initrd: Path


class ImageError(RuntimeError):
    """The boot images cannot be had here (no apt, no network and nothing cached, ...)."""


def cache_dir() -> Path:
    explicit = os.environ.get("OOMWATCH_VM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "oomwatch-vm"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock: two test runs never download or build into one cache at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def boot_images(series: str, *, cache: Path | None = None, refresh: bool = False) -> BootImages:
    """The cached images of a kernel series, fetched and built first when missing.

    Without `refresh`, a series already in the cache is used as it is (no network); with it,
    the metapackage is looked up again and a newer build fetched when there is one.
    """
    if series not in KERNELS:
        raise ImageError(f"unknown kernel series {series!r}; one of {', '.join(KERNELS)}")
    root = cache or cache_dir()
    with _locked(root / ".lock"):
        kernel_dir = None if refresh else _cached_kernel(root, series)
        if kernel_dir is None:
            kernel_dir = _fetch_kernel(root, KERNELS[series])
        meta = json.loads((kernel_dir / "kernel.json").read_text())
        initrd = _build_initrd(kernel_dir, meta["release"], meta["modules"])
    return BootImages(series, kernel_dir.name, meta["release"], kernel_dir / "vmlinuz", initrd)


def _cached_kernel(root: Path, series: str) -> Path | None:
    found = sorted((root / series).glob("*/kernel.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def _apt(*argv: str, cwd: Path | None = None) -> str:
    if shutil.which(argv[0]) is None:
        raise ImageError(f"{argv[0]} not found: the lab fetches Debian's kernel packages with apt")
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise ImageError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _image_package(series: KernelSeries) -> str:
    """The image package the metapackage's candidate depends on (`apt-cache depends`)."""
    for _ in range(2):
        out = _apt("apt-cache", "depends", series.metapackage)
        names: list[str] = re.findall(r"Depends: (linux-image-\S+)", out)
        if names:
            return names[0]
        _apt("apt-get", "update", "-q")  # no lists yet, or stale ones
    raise ImageError(f"apt-cache knows no image package behind {series.metapackage}")


def _fetch_kernel(root: Path, series: KernelSeries) -> Path:
    package = _image_package(series)
    with tempfile.TemporaryDirectory(dir=root, prefix=".download-") as tmp:
        try:
            _apt("apt-get", "download", "-q", package, cwd=Path(tmp))
        except ImageError:
            _apt("apt-get", "update", "-q")  # the lists named a build the mirror dropped
            _apt("apt-get", "download", "-q", package, cwd=Path(tmp))
        [deb] = Path(tmp).glob("*.deb")
        kernel_dir = root / series.name / deb.stem
        staging = Path(tmp) / "kernel"
        staging.mkdir()
        release, modules = _extract(deb, staging)
        (staging / "kernel.json").write_text(
            json.dumps({"release": release, "modules": modules, "deb": deb.name}, indent=1)
        )
        shutil.rmtree(kernel_dir, ignore_errors=True)
        kernel_dir.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(kernel_dir)
    return kernel_dir


def _extract(deb: Path, dest: Path) -> tuple[str, list[str]]:
    """Keep vmlinuz and the 9p/virtio modules of a kernel package; return the release and
    the modules to load, in order."""
    available: dict[str, bytes] = {}
    builtin: set[str] = set()
    release = ""
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if not member.isfile():
                    continue
                if name.startswith("boot/vmlinuz-"):
                    release = name.removeprefix("boot/vmlinuz-")
                    _save(tar, member, dest / "vmlinuz")
                    continue
                match = re.fullmatch(r"lib/modules/[^/]+/(.+)", name)
                if match is None:
                    continue
                inner = match[1]
                if inner == "modules.builtin":
                    builtin = {_module_name(line) for line in _read(tar, member).decode().split()}
                elif inner.startswith(_MODULE_DIRS) and re.search(r"\.ko(\.xz)?$", inner):
                    data = _read(tar, member)
                    available[_module_name(inner)] = (
                        lzma.decompress(data) if inner.endswith(".xz") else data
                    )
    if proc.returncode != 0 or not release:
        raise ImageError(f"{deb.name}: no kernel image in the package")
    order = load_order(available, builtin)
    for name in order:
        (dest / "modules").mkdir(exist_ok=True)
        (dest / "modules" / f"{name}.ko").write_bytes(available[name])
    return release, order


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = tar.extractfile(member)
    assert handle is not None
    return handle.read()


def _save(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> None:
    path.write_bytes(_read(tar, member))


def _module_name(path: str) -> str:
    """`kernel/fs/9p/9p.ko.xz` -> `9p` (the kernel treats - and _ alike in names)."""
    return path.rsplit("/", 1)[-1].split(".ko", 1)[0].replace("-", "_")


def module_depends(ko: bytes) -> list[str]:
    """The `depends=` of a module's .modinfo section (what `modinfo -F depends` prints)."""
    match = _DEPENDS.search(ko)
    if match is None or not match[1]:
        return []
    return [name.decode().replace("-", "_") for name in match[1].split(b",")]


def load_order(available: dict[str, bytes], builtin: set[str]) -> list[str]:
    """The modules to insmod, each after what it depends on; built-in ones are skipped."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order or name in builtin:
            return
        if name in path:
            raise ImageError(f"module dependency cycle: {' -> '.join((*path, name))}")
        if name not in available:
            raise ImageError(f"module {name} is neither in the package nor built in")
        for dependency in module_depends(available[name]):
            visit(dependency, (*path, name))
        order.append(name)

    for name in ROOT_MODULES:
        visit(name, ())
    return order


def _build_initrd(kernel_dir: Path, release: str, modules: list[str]) -> Path:
    """The initramfs (busybox, modules, init), rebuilt when any input changed."""
    if not BUSYBOX.is_file() or b"/ld-linux" in BUSYBOX.read_bytes()[:4096]:
        raise ImageError(f"{BUSYBOX} is missing or dynamically linked: install busybox-static")
    init = INIT_SCRIPT.read_bytes()
    digest = hashlib.sha256(init + BUSYBOX.read_bytes() + "\n".join(modules).encode())
    initrd = kernel_dir / f"initrd-{digest.hexdigest()[:16]}.gz"
    if initrd.is_file():
        return initrd
    if shutil.which("cpio") is None:
        raise ImageError("cpio not found: install cpio")
    with tempfile.TemporaryDirectory(dir=kernel_dir, prefix=".initrd-") as tmp:
        stage = Path(tmp) / "root"
        for sub in ("bin", "dev", "proc", "sys", "host", "modules"):
            (stage / sub).mkdir(parents=True)
        shutil.copy2(BUSYBOX, stage / "bin" / "busybox")
        (stage / "init").write_bytes(init)
        (stage / "init").chmod(0o755)
        for name in modules:
            shutil.copy2(kernel_dir / "modules" / f"{name}.ko", stage / "modules" / f"{name}.ko")
        (stage / "modules" / "order").write_text("".join(f"{name}\n" for name in modules))
        (stage / "release").write_text(release + "\n")
        files = sorted(str(p.relative_to(stage)) for p in stage.rglob("*"))
        archive = Path(tmp) / "initrd.gz"
        with open(archive, "wb") as out:
            cpio = subprocess.Popen(
                ["cpio", "--quiet", "-o", "-H", "newc"],
                cwd=stage,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            gzip = subprocess.Popen(["gzip", "-9n"], stdin=cpio.stdout, stdout=out)
            assert cpio.stdin is not None and cpio.stdout is not None
            cpio.stdout.close()
            cpio.stdin.write("".join(f"{name}\n" for name in files).encode())
            cpio.stdin.close()
            if cpio.wait() != 0 or gzip.wait() != 0:
                raise ImageError("building the initramfs with cpio | gzip failed")
        for old in kernel_dir.glob("initrd-*.gz"):
            old.unlink()
        archive.rename(initrd)
    return initrd
