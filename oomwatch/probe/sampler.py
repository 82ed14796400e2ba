"""Read this process's memory and its frameworks' allocator statistics.

Everything here must be cheap beside a training loop.  `/proc/self/status` gives RSS and its
anon/file/shmem split and swap from the kernel's per-mm counters, at a fixed cost of tens
of microseconds.  USS (Private_Clean + Private_Dirty, psutil's definition) and
AnonHugePages exist only in `/proc/self/smaps_rollup`, which walks the page tables: ~5 ms
of CPU for a process with torch loaded, so `RollupBudget` reads it only as often as keeps
it under 0.1 % of the time.  Frameworks are looked at only if the process already imported
them, and CUDA only once it is initialised: the probe never imports torch or TensorFlow
itself, and never creates a CUDA context.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

_STATUS_FIELDS = {"VmRSS": "rss", "RssAnon": "anon", "RssShmem": "shmem", "VmSwap": "swap"}
_ROLLUP_FIELDS = {
    "Private_Clean": "private_clean",
    "Private_Dirty": "private_dirty",
    "Private_Hugetlb": "private_hugetlb",
    "AnonHugePages": "anon_huge",
}


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    rss_bytes: int
    uss_bytes: int | None = None
    anon_bytes: int | None = None
    anon_huge_bytes: int | None = None
    shmem_bytes: int | None = None
    swap_bytes: int | None = None


def parse_kb_fields(text: str, wanted: dict[str, str]) -> dict[str, int]:
    """`Key:   123 kB` lines of /proc status files -> {wanted[Key]: bytes}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        name = wanted.get(key)
        parts = rest.split()
        if name and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name] = int(parts[0]) * 1024
    return out


class RollupBudget:
    """Allows the next smaps_rollup read once `cost / fraction` has passed since the last."""

    def __init__(self, fraction: float = 0.001) -> None:
        self.fraction = fraction
        self._next_s = 0.0

    def due(self, now_s: float) -> bool:
        return now_s >= self._next_s

    def spent(self, cost_s: float, now_s: float) -> None:
        self._next_s = now_s + cost_s / self.fraction


def process_memory(
    budget: RollupBudget | None = None,
    status_path: str = "/proc/self/status",
    rollup_path: str = "/proc/self/smaps_rollup",
) -> ProcessMemory:
    """This process's memory; USS and THP only when the budget allows a rollup read."""
    with open(status_path) as handle:
        status = parse_kb_fields(handle.read(), _STATUS_FIELDS)
    rollup: dict[str, int] = {}
    started = time.perf_counter()
    if budget is None or budget.due(started):
        try:
            with open(rollup_path) as handle:
                rollup = parse_kb_fields(handle.read(), _ROLLUP_FIELDS)
        except OSError:
            rollup = {}
        if budget is not None:
            done = time.perf_counter()
            budget.spent(done - started, done)
    uss = None
    if "private_clean" in rollup and "private_dirty" in rollup:
        uss = rollup["private_clean"] + rollup["private_dirty"] + rollup.get("private_hugetlb", 0)
    return ProcessMemory(
        rss_bytes=status.get("rss", 0),
        uss_bytes=uss,
        anon_bytes=status.get("anon"),
        anon_huge_bytes=rollup.get("anon_huge"),
        shmem_bytes=status.get("shmem"),
        swap_bytes=status.get("swap"),
    )


def cuda_allocator_stats() -> dict[str, int | str] | None:
    """The caching allocator's counters for the current device, or None without CUDA in use."""
    torch: Any = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    device = torch.cuda.current_device()
    stats = torch.cuda.memory_stats(device)
    if not stats:
        return None
    return cuda_stats_from_memory_stats(device, stats)


def cuda_stats_from_memory_stats(device: int, stats: dict[str, Any]) -> dict[str, int | str]:
    """Pick the fields the flight recorder keeps from `torch.cuda.memory_stats()`.

    The device is written as torch names it, `cuda:N`: the same text as a CUDA OOM event's
    device and a string like TensorFlow's, so every `device` in a flight record is a string.
    """
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
    out: dict[str, int | str] = {"device": f"cuda:{int(device)}"}
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
