"""Recording what a real kernel did: `record(...)` keeps what the kernel printed and the
counter files of the scratch tree as fixtures for the fast tests
(`tests/data/kernel-v2/<release>/`), when $OOMWATCH_V2_FIXTURES names a directory (the VM
runner sets it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from oomwatch.lab import ScratchMemcg
from oomwatch.lab.vm import FIXTURES_ENV

COUNTER_FILES = (
    "memory.events",
    "memory.events.local",
    "memory.max",
    "memory.oom.group",
    "memory.current",
    "memory.stat",
    "memory.swap.max",
)


def snapshot(scratch: ScratchMemcg) -> dict[str, dict[str, str]]:
    """Every memory file that matters, of every cgroup of the tree, as the kernel wrote it."""
    out: dict[str, dict[str, str]] = {}
    for memcg in scratch.memcgs():
        files: dict[str, str] = {}
        for name in COUNTER_FILES:
            path = memcg.fs_path / name
            if path.exists():
                files[name] = path.read_text()
        out[memcg.relpath] = files
    return out


def record(
    name: str,
    records: Iterable[bytes],
    scratch: ScratchMemcg,
    before: dict[str, dict[str, str]] | None = None,
    **facts: object,
) -> None:
    """Save one scenario: raw /dev/kmsg records (`<name>.kmsg`) and the counter files before
    and after with what the test knows (`<name>.json`)."""
    where = os.environ.get(FIXTURES_ENV)
    if not where:
        return
    directory = Path(where)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.kmsg").write_bytes(
        b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for raw in records)
    )
    doc = {
        "kernel": os.uname().release,
        "scenario": name,
        "scratch": scratch.relpath,
        "before": before or {},
        "after": snapshot(scratch),
        "facts": facts,
    }
    (directory / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
