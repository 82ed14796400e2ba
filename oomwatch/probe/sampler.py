"""Read this process's memory and its frameworks' allocator statistics.

Everything here is cheap enough to run once a second beside a training loop: RSS from
`/proc/self/statm` (via psutil), USS/anon/THP/shmem/swap from `/proc/self/smaps_rollup` (one
read instead of psutil's full `smaps` walk; USS = Private_Clean + Private_Dirty, psutil's
definition).  Frameworks are looked at only if the process already imported them, and CUDA
only once it is initialised: the probe never imports torch or TensorFlow itself, and never
creates a CUDA context.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import psutil

_ROLLUP_FIELDS = {
    "Private_Clean": "private_clean",
    "Private_Dirty": "private_dirty",
    "Private_Hugetlb": "private_hugetlb",
    "Anonymous": "anon",
    "AnonHugePages": "anon_huge",
    "Pss_Shmem": "shmem",  # smaps_rollup has no plain Shmem; unshared shmem counts in full
    "Swap": "swap",
}


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    rss_bytes: int
    uss_bytes: int | None = None
    anon_bytes: int | None = None
    anon_huge_bytes: int | None = None
    shmem_bytes: int | None = None
    swap_bytes: int | None = None


def parse_smaps_rollup(text: str) -> dict[str, int]:
    """The fields of `/proc/<pid>/smaps_rollup` we use, in bytes."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        name = _ROLLUP_FIELDS.get(key)
        parts = rest.split()
        if name and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name] = int(parts[0]) * 1024
    return out


def process_memory(rollup_path: str = "/proc/self/smaps_rollup") -> ProcessMemory:
    rss = psutil.Process().memory_info().rss
    try:
        with open(rollup_path) as handle:
            rollup = parse_smaps_rollup(handle.read())
    except OSError:
        return ProcessMemory(rss_bytes=rss)
    uss = None
    if "private_clean" in rollup and "private_dirty" in rollup:
        uss = rollup["private_clean"] + rollup["private_dirty"] + rollup.get("private_hugetlb", 0)
    return ProcessMemory(
        rss_bytes=rss,
        uss_bytes=uss,
        anon_bytes=rollup.get("anon"),
        anon_huge_bytes=rollup.get("anon_huge"),
        shmem_bytes=rollup.get("shmem"),
        swap_bytes=rollup.get("swap"),
    )


def cuda_allocator_stats() -> dict[str, int] | None:
    """The caching allocator's counters for the current device, or None without CUDA in use."""
    torch: Any = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    device = torch.cuda.current_device()
    stats = torch.cuda.memory_stats(device)
    if not stats:
        return None
    return cuda_stats_from_memory_stats(device, stats)


def cuda_stats_from_memory_stats(device: int, stats: dict[str, Any]) -> dict[str, int]:
    """Pick the fields the flight recorder keeps from `torch.cuda.memory_stats()`."""
    picks = {
        "allocated_bytes": "allocated_bytes.all.current",
        "allocated_peak_bytes": "allocated_bytes.all.peak",
        "reserved_bytes": "reserved_bytes.all.current",
        "reserved_peak_bytes": "reserved_bytes.all.peak",
        "active_bytes": "active_bytes.all.current",
        "active_peak_bytes": "active_bytes.all.peak",
        "inactive_split_bytes": "inactive_split_bytes.all.current",
        "num_alloc_retries": "num_alloc_retries",
        "num_ooms": "num_ooms",
    }
    out = {"device": int(device)}
    for name, key in picks.items():
        value = stats.get(key)
        if isinstance(value, int) and value >= 0:
            out[name] = value
    return out


class TensorFlowMemory:
    """`tf.config.experimental.get_memory_info` for the first device that supports it.

    Supported devices are GPUs and TPUs (some builds also answer for `CPU:0`); a device that
    raises is not asked again, so an unsupported setup costs one exception, not one a second.
    """

    def __init__(self) -> None:
        self._device: str | None = None
        self._probed = False

    def read(self) -> dict[str, int | str] | None:
        tf: Any = sys.modules.get("tensorflow")
        if tf is None:
            return None
        if not self._probed:
            self._probed = True
            self._device = self._pick_device(tf)
        if self._device is None:
            return None
        try:
            info = tf.config.experimental.get_memory_info(self._device)
        except (ValueError, RuntimeError):
            self._device = None
            return None
        return {
            "device": self._device,
            "current_bytes": int(info.get("current", 0)),
            "peak_bytes": int(info.get("peak", 0)),
        }

    @staticmethod
    def _pick_device(tf: Any) -> str | None:
        candidates = [
            d.name.split("device:")[-1]
            for kind in ("GPU", "TPU")
            for d in tf.config.list_logical_devices(kind)
        ] + ["CPU:0"]
        for device in candidates:
            try:
                tf.config.experimental.get_memory_info(device)
            except (ValueError, RuntimeError):
                continue
            return str(device)
        return None
