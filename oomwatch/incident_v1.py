"""Reading what oomwatch 0.1.0 stored (JSON shape version 1) in the current shape: an
upgraded agent keeps the incidents an older one recorded (`Incident.from_dict`)."""

from __future__ import annotations

from typing import Any

from oomwatch.kernel_limits import UNLIMITED_BYTES

# Version 1 (oomwatch 0.1.0) kept the kernel's kB; the kernel's "no limit" (v1
# PAGE_COUNTER_MAX pages, printed in kB) was stored as that number.
_V1_KB = {
    "memcg": ("usage", "limit", "swap_usage", "swap_limit", "kmem_usage"),
    "victims": (
        "total_vm",
        "anon_rss",
        "file_rss",
        "shmem_rss",
        "pgtables",
        "reaped_anon_rss",
    ),
}
_V1_LIMITS = ("limit", "swap_limit")


def upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 record in the current shape (kB -> bytes, "no limit" -> None); a
    current record is returned as it is."""
    memcg, victims = data.get("memcg"), data.get("victims") or []
    tasks = data.get("tasks") or []
    old = (
        (isinstance(memcg, dict) and any(k.endswith("_kb") for k in memcg))
        or any(isinstance(v, dict) and any(k.endswith("_kb") for k in v) for v in victims)
        or any(isinstance(t, dict) and "swapents" in t for t in tasks)
    )
    if not old:
        return data
    data = dict(data)
    if isinstance(memcg, dict):
        data["memcg"] = _kb_to_bytes(memcg, _V1_KB["memcg"])
    data["victims"] = [
        _kb_to_bytes(v, _V1_KB["victims"]) if isinstance(v, dict) else v for v in victims
    ]
    data["tasks"] = [
        {("swapents_pages" if k == "swapents" else k): v for k, v in t.items()}
        if isinstance(t, dict)
        else t
        for t in tasks
    ]
    data["findings"] = [  # 0.1.0's evidence: usage_kb, limit_kb, total_vm_kb
        {**f, "evidence": _kb_to_bytes(f["evidence"], _kb_names(f["evidence"]))}
        if isinstance(f, dict) and isinstance(f.get("evidence"), dict)
        else f
        for f in data.get("findings") or []
    ]
    return data


def _kb_names(record: dict[str, Any]) -> tuple[str, ...]:
    return tuple(k.removesuffix("_kb") for k in record if k.endswith("_kb"))


def _kb_to_bytes(record: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if not k.endswith("_kb")}
    for name in names:
        kb = record.get(f"{name}_kb")
        if not isinstance(kb, int):
            continue
        value = kb * 1024
        out[f"{name}_bytes"] = None if name in _V1_LIMITS and value >= UNLIMITED_BYTES else value
    return out
